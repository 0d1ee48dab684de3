# Every user target creates .venv and installs the pinned packages on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# make sim options (see `hotline sim --help`)
BACKEND    ?= auto
DATA       ?=
BATCH_SIZE ?= 1024
HOT_ROWS   ?= 16384
SAMPLES    ?= 100000
WAVES      ?= 0
LANES      ?= 1

.PHONY: all setup icarus test test-fast test-full test-ci test-readme formal sim bench bench-quick gpu-check train fpga clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,torchrec]'
	$(BIN)/pip install -q --no-deps torchrec==1.8.0
	touch $@

setup: $(STAMP)

# Icarus Verilog (Debian package) for the cocotb regressions that run on both simulators;
# without it those runs skip with a message.
icarus:
	@command -v iverilog >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
	    && apt-get install -y -q iverilog >/dev/null 2>&1 || echo "note: Icarus Verilog not installed; its runs will skip" >&2; }

# Test processes (pytest-xdist): make test takes one test file per process at a time, test-ci
# one test; builds of one design are shared between them (docs/toolchain.md, the build cache).
WORKERS ?= 2

test: $(STAMP) icarus
	$(BIN)/python -m pytest -q -m "not slow" -n $(WORKERS) --dist loadfile

# The inner loop: contract, models, host runtime, CLI and Amaranth-simulator tests; nothing
# marked slow or rtl (no Verilator, Icarus or Yosys/nextpnr: tests/conftest.py), and not the
# README's commands on a clean copy (make test-readme).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not rtl" --ignore=tests/test_readme.py

test-full: $(STAMP) icarus
	$(BIN)/python -m pytest -q

# The reduced slow set CI runs (slow tests marked ci), e.g. the README's Verilator commands
# profile --learner hw and fragment --backend verilator, as written, from a clean copy.
test-ci: $(STAMP) icarus
	$(BIN)/python -m pytest -q -m "slow and ci" -n $(WORKERS) --dist load

# Every README command as written (fast and slow tiers; tests/test_readme.py).
test-readme: $(STAMP) icarus
	$(BIN)/python -m pytest -q tests/test_readme.py

# The formal tier at full depth (docs/verification.md): every property, then every mutant,
# which must fail with a counterexample VCD under build/formal. make test runs a reduced
# tier (tests/test_formal.py).
formal: $(STAMP)
	$(BIN)/python -m hotline.sim.formal --out build/formal

sim: $(STAMP)
	$(BIN)/hotline sim --backend $(BACKEND) --batch-size $(BATCH_SIZE) --hot-rows $(HOT_ROWS) \
	    --samples $(SAMPLES) $(if $(DATA),--data $(DATA)) $(if $(filter 1,$(WAVES)),--waves) \
	    --lanes $(LANES) --real --out build/sim

bench: $(STAMP)
	$(BIN)/python -m hotline.bench --out bench/results.json

bench-quick: $(STAMP)
	$(BIN)/python -m hotline.bench --quick --out build/bench-quick.json

# issue 45's checks on a CUDA GPU (under 8 minutes): module equivalence, the placements'
# embedding-path throughput, the TorchRec peer; without CUDA it says so and exits 0
# (python -m hotline.bench.gpu_check --cpu runs it on the CPU in reduced sizes)
gpu-check: $(STAMP)
	$(BIN)/python -m hotline.bench.gpu_check --out build/gpu-check.json

# make train options (see `hotline train --help`): a short DLRM run on the generator, baseline
# first, then hotline mode with the model:// accelerator, compared with it (--compare: its plot
# shows both); MODE=hotline|baseline|device-only runs that mode alone. Each mode writes its own
# build/train/train-MODE.json and .png.
MODE          ?=
TRAIN_SAMPLES ?= 500000
MAX_IND_RANGE ?= 1000000
# the hot set: 10% of the tables' rows, where most samples are popular (54% here), the regime
# the Hotline and FAE papers study
TRAIN_HOT_FRACTION ?= 0.1
TRAIN_THREADS ?= 1
TRAIN_ARGS    ?=

# $(call train_mode,MODE,MORE ARGS)
train_mode = $(BIN)/hotline train synth:criteo-kaggle:$(TRAIN_SAMPLES) --max-ind-range $(MAX_IND_RANGE) \
	    --mode $(1) --batch-size $(BATCH_SIZE) --hot-fraction $(TRAIN_HOT_FRACTION) --epochs 1 \
	    --threads $(TRAIN_THREADS) $(TRAIN_ARGS) $(2) \
	    --json build/train/train-$(1).json --plot build/train/train-$(1).png

train: $(STAMP)
ifeq ($(MODE),)
	$(call train_mode,baseline)
	$(call train_mode,hotline,--compare build/train/train-baseline.json)
else
	$(call train_mode,$(MODE))
endif

# make fpga BOARD=ulx3s-85f|orangecrab-85f|icebreaker|all (see `hotline fpga build --help`):
# bitstream in build/boards/BOARD/, report in build/boards/BOARD.json.
BOARD ?= ulx3s-85f

fpga: $(STAMP)
	$(BIN)/hotline fpga build --board $(BOARD) --json build/boards/$(BOARD).json

clean:
	rm -rf build sim_build .pytest_cache
