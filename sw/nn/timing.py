"""`HostClock`: the main thread's seconds of host-side embedding work (what a GPU node's CPU
does too), for `make bench` and `hotline train`'s report."""
import time


class HostClock:
    """Main-thread seconds of host-side work (outermost calls only: a method calling another
    is counted once): a `RowStore`'s gather / scatter / prefetch and in-place batches, and the
    collection's key checks, sample order, announcements and unique keys (numpy and torch on
    the CPU, which a GPU node's CPU would do too); wrapped on the instances."""

    STORE = ("gather", "scatter", "prefetch", "gather_lookups", "update_lookups",
             "scatter_lookups")
    COLLECTION = ("_keys", "_sample_order", "_announce", "_unique")

    def __init__(self, store, collection=None):
        self.seconds, self._depth = 0.0, 0
        for obj, names in ((store, self.STORE), (collection, self.COLLECTION)):
            for name in names if obj is not None else ():
                if hasattr(obj, name):
                    object.__setattr__(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, fn):
        def call(*args, **kw):
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds += time.perf_counter() - t0
        return call
