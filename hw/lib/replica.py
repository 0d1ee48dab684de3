"""Register replicas: copies of one register that synthesis keeps apart.

A register that drives the address pins of dozens of block RAMs spread over the die has
routes of 10 ns and more; a copy per bank, placed by its bank, keeps them short. Yosys merges
identical flip-flops (``opt_merge``) even when their wires carry ``keep``, so `replica`
marks its signals with ``REPLICA_ATTR`` and every synthesis script of the project runs
``KEEP_REPLICAS`` after reading the design: it puts ``keep`` on the flip-flops driving them.
"""
from amaranth import Signal

__all__ = ["REPLICA_ATTR", "KEEP_REPLICAS", "replica"]

REPLICA_ATTR = "hotline_replica"
KEEP_REPLICAS = f"setattr -set keep 1 a:{REPLICA_ATTR} %ci1:+$dff[Q] t:$dff %i"


def replica(shape, name):
    """A reset-less register signal that synthesis keeps as a separate copy."""
    return Signal(shape, name=name, reset_less=True, attrs={REPLICA_ATTR: 1})
