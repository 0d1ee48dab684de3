"""RowDMAModel's vectorised path against its own row-by-row loop (the one the RTL is checked
against), on fuzzed descriptors, keys, slots and banks."""
import numpy as np
import pytest

from hotline.contract.keys import make_keys
from hotline.model.dma_model import RowDMAModel


def configure(rng, model):
    for t in range(6):
        if rng.random() < 0.85:
            model.write_descriptor(t, int(rng.integers(0, 64)) * 8 * (1 if rng.random() < 0.9 else 3)
                                   + 4096 * t, int(rng.integers(0, 40)),
                                   int(rng.choice([0, 8, 16, 24, 64, 12])))
    model.set_staging(65536 + 8 * int(rng.integers(0, 3)), int(rng.choice([16, 64, 72])),
                      int(rng.integers(1, 30)), int(rng.choice([1, 2])))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("direction", ["gather", "scatter"])
def test_fast_path_equals_loop(seed, direction):
    rng = np.random.default_rng(seed)
    fast, slow = RowDMAModel(), RowDMAModel()
    configure(rng, fast)
    configure(np.random.default_rng(seed), slow)
    mem = np.random.default_rng(seed + 100).integers(0, 256, 1 << 17, dtype=np.uint8)
    mem_slow = mem.copy()
    for _ in range(5):
        keys = make_keys(rng.integers(0, 7, 20), rng.integers(0, 45, 20)).astype(np.int64)
        keys = keys[:int(rng.integers(0, 21))]
        bank = int(rng.integers(0, 3))
        a = fast.run(mem, direction, keys, bank)
        b = slow.run(mem_slow, direction, keys, bank, read_error=lambda addr: False)
        assert a == b
        assert fast.counters() == slow.counters() and fast.error_cause == slow.error_cause
        assert np.array_equal(mem, mem_slow)
