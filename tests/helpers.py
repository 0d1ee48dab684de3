"""Plain helpers shared by the test modules (imported as ``from helpers import ...``; the
fixtures are in conftest.py, which is never imported as a module).

- `DATA`, `CRITEO_CSV`, `ALL_REAL`: the shared real data files (``../shared/data``), usable
  in parametrize lists;
- `real_file`: a file's path, or a skip when it is absent;
- `param`: ``pytest.param`` with ``slow=True`` for the cases of a parametrized test that
  belong to the slow tier;
- `TABLE_RTOL`: per optimizer, how close trained tables must be to a reference's.
"""
import pytest

from hotline.data import shared_data_dir

DATA = shared_data_dir()

CRITEO_CSV = [
    "criteo_kaggle/train_random4584.csv.gz",
    "criteo_kaggle/train_head1999.csv.gz",
    "criteo_kaggle/test_head1999.csv.gz",
    "criteo_kaggle/train_rows0-206k_sub1pct.csv.gz",
    "criteo_kaggle/train_rows39.80M-39.99M_sub1pct.csv.gz",
]
ALL_REAL = CRITEO_CSV + [
    "criteo_kaggle/train_random45840_7cat.arff.gz",
    "movielens/ml-100k.inter.gz",
    "alimama/dmr_alimama_sampled_train500.csv.gz",
    "amazon_book/ngcf_test.txt.gz",
]


# Trained tables against a reference, relative to the table's largest magnitude. Losses are
# held to 1e-6 everywhere. Two paths sum a bag's rows (and a row's gradients) in different
# orders, and a float32 kernel's order follows the CPU's vector width: Adam and row-wise Adagrad
# divide by the root of an accumulated square, which turns a last-bit difference into several.
# Measured: under 1e-6 on AVX2 machines; 1.3e-6 to 2.8e-6 on an AVX-512 one (Sapphire Rapids).
TABLE_RTOL = {"sgd": 1e-6, "rowwise_adagrad": 5e-6, "adam": 5e-6}


def real_file(rel):
    """Path of a file under ../shared/data, or skip the test when it is absent."""
    p = DATA / rel
    if not p.exists():
        pytest.skip(f"real data not present: {p}")
    return p


def param(*values, slow=False, id=None, marks=()):
    """``pytest.param(*values)``, in the slow tier when ``slow`` (run by `make test-full`)."""
    marks = [marks] if isinstance(marks, pytest.MarkDecorator) else list(marks)
    return pytest.param(*values, id=id, marks=marks + [pytest.mark.slow] if slow else marks)


def two_clock_simulator(dut, uart_s, sync_ratio, sync_phase=0.0):
    """A Simulator of ``dut`` with the ``uart`` clock (period ``uart_s`` s) and the ``sync``
    clock at ``sync_ratio`` times that period, its first edge ``sync_phase`` periods late."""
    from amaranth.sim import Simulator  # lazy: (see simulate)
    sim = Simulator(dut)
    sim.add_clock(uart_s, domain="uart")
    sim.add_clock(uart_s * sync_ratio, phase=uart_s * sync_ratio * sync_phase, domain="sync")
    return sim


def simulate(dut, main, *background):
    """Run ``dut`` in Amaranth's simulator on a clock until the testbench ``main`` returns,
    with ``background`` testbenches beside it (they end with it)."""
    from amaranth.sim import Simulator  # lazy: helpers is imported by tests without Amaranth
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for proc in background:
        sim.add_testbench(proc, background=True)
    sim.add_testbench(main)
    sim.run()
