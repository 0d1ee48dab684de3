"""AXI4Quiesce: a gate in front of an AXI4 master that lets the transactions in flight finish and
lets no new one start, so that the master can be reset without leaving its slave mid-transaction.

Ports: ``m`` In(`AXI4Signature`) (the master's side), ``s`` Out(`AXI4Signature`) (the slave's
side), ``hold`` In(1), ``quiet`` Out(1).

With ``hold`` low every signal passes straight through (no latency; a valid or ready is one AND
gate with a register) and the gate only counts: ARs without their last R beat, AWs without
their B response, and W bursts against AWs (W may run ahead of its AW).

With ``hold`` high each request channel closes at its next boundary: a cycle in which the slave
is not being offered a beat it has not taken (so the slave never sees a valid withdrawn). A
closed channel shows the slave ``valid`` 0 and the master ``ready`` 0, which AXI allows. W
never closes inside a burst and stays open while an AW that was taken still owes its data; AW
stays open while a complete W burst has no AW yet. So the master can always finish what the
slave has started.

``quiet``: ``hold`` is high, every request channel is closed and nothing is in flight (every AR
has had its last R beat, every AW its B response, W bursts and AWs pair up). In a ``quiet``
cycle the slave is offered nothing and owes nothing: resetting the master then is safe. It is
a function of registers only; it rises two cycles after the last response once the channels
are closed (the in-flight counts take the handshakes a cycle late).
"""
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature
from .up_down import up_down

__all__ = ["AXI4Quiesce"]

_GATED = ("arvalid", "arready", "awvalid", "awready", "wvalid", "wready")


class AXI4Quiesce(wiring.Component):
    """Parameters: ``addr_width``, ``data_width``, ``id_width`` (as `AXI4Signature`);
    ``max_in_flight``: a bound on the master's outstanding transactions (sizes the counters)."""

    def __init__(self, addr_width, data_width, id_width=1, max_in_flight=256):
        self.max_in_flight = max_in_flight
        sig = AXI4Signature(addr_width, data_width, id_width)
        super().__init__({"m": In(sig), "s": Out(sig), "hold": In(1), "quiet": Out(1)})

    def elaborate(self, platform):
        m = Module()
        mst, slv = self.m, self.s
        for name, member in self.s.signature.members.items():
            if name not in _GATED:
                src, dst = (mst, slv) if member.flow == Out else (slv, mst)
                m.d.comb += getattr(dst, name).eq(getattr(src, name))
        closed = {ch: Signal(name=f"closed_{ch}") for ch in ("ar", "aw", "w")}
        for ch, c in closed.items():
            m.d.comb += [getattr(slv, f"{ch}valid").eq(getattr(mst, f"{ch}valid") & ~c),
                         getattr(mst, f"{ch}ready").eq(getattr(slv, f"{ch}ready") & ~c)]

        n = self.max_in_flight
        reads, writes = Signal(range(n + 1), name="reads"), Signal(range(n + 1), name="writes")
        w_ahead = Signal(range(-n, n + 1))  # W bursts completed minus AWs taken
        w_mid = Signal()                    # a W burst has begun and not ended
        ar = slv.arvalid & slv.arready
        aw = slv.awvalid & slv.awready
        w = slv.wvalid & slv.wready
        r_last = slv.rvalid & slv.rready & slv.rlast
        b = slv.bvalid & slv.bready
        w_ahead_next, w_mid_next = Signal.like(w_ahead), Signal()
        m.d.comb += [w_ahead_next.eq(up_down(w_ahead, w & mst.wlast, aw)),
                     w_mid_next.eq(Mux(w, ~mst.wlast, w_mid))]
        # The in-flight counts take the handshakes a cycle late, from registers (timing: the
        # master's late arvalid into the counter's enable was a 9.6 ns path); ``quiet`` waits
        # for a registered AR or AW too.
        late = {name: Signal(name=f"{name}_taken") for name in ("ar", "r_last", "aw", "b")}
        m.d.sync += [late["ar"].eq(ar), late["r_last"].eq(r_last), late["aw"].eq(aw),
                     late["b"].eq(b)]
        m.d.sync += [reads.eq(up_down(reads, late["ar"], late["r_last"])),
                     writes.eq(up_down(writes, late["aw"], late["b"])),
                     w_ahead.eq(w_ahead_next), w_mid.eq(w_mid_next)]

        # A channel may close where the slave is not mid-offer. W never closes inside a burst,
        # and stays open while a taken AW owes its data; AW stays open while a W burst has no
        # AW yet.
        aw_needed = w_ahead_next > 0
        w_needed = (w_ahead_next < 0) | w_mid_next
        for ch, needed in (("ar", C(0)), ("aw", aw_needed), ("w", w_needed)):
            boundary = ~getattr(slv, f"{ch}valid") | getattr(slv, f"{ch}ready")
            m.d.sync += closed[ch].eq(self.hold & boundary & ~needed)
        m.d.comb += self.quiet.eq(self.hold & closed["ar"] & closed["aw"] & closed["w"]
                                  & (reads == 0) & (writes == 0) & ~late["ar"] & ~late["aw"]
                                  & (w_ahead == 0) & ~w_mid)
        return m
