"""`compiled`: a model's inner loop compiled by numba on its first call.

The models' per-key loops (the CAM's inserts, the learner's counts, the cold-key set's replay,
the hot index's cold count) and the hotline store's per-lookup pass are plain Python over
numpy arrays; numba runs them 50-100x as fast as the interpreter. Compiling on first use
keeps ``import`` free of numba (a second to import) for the commands that never call them,
and the disk cache spares later processes the compile."""
import functools


def compiled(fn):
    """``fn`` (a function numba compiles in nopython mode) as a callable that compiles it on
    first call: ``nogil`` (another thread runs while it does), cached on disk. Positional
    arguments only."""
    @functools.cache
    def kernel():
        import numba  # lazy: numba takes a second to import; only these loops need it
        return numba.njit(cache=True, nogil=True)(fn)

    @functools.wraps(fn)
    def call(*args):
        return kernel()(*args)
    return call
