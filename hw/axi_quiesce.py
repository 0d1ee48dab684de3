"""AXI4Quiesce: a gate in front of an AXI4 master that lets the transactions in flight finish and
lets no new one start, so that the master can be reset without leaving its slave mid-transaction.

Ports: ``m`` In(`AXI4Signature`) (the master's side), ``s`` Out(`AXI4Signature`) (the slave's
side), ``hold`` In(1), ``quiet`` Out(1), ``expired`` Out(1).

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

Watchdog (``timeout`` cycles, None: none): a slave that stops answering would keep ``quiet``
low for ever. When ``hold`` is high, every request channel is closed with W and AW paired, and
only responses are owed, but no R or B beat has come for ``timeout`` cycles, the gate gives
them up: ``expired`` is high for one cycle, the owed R bursts and B responses move to stale
counts, and ``quiet`` rises. A stale response that comes later is taken from the slave by the
gate itself (ready high, valid hidden from the master) and dropped: with one ID the slave
answers in order, so the first ones to come are the stale ones, and the master, reset
meanwhile, never sees an answer to a request it did not make. Requests the slave never takes
(a ready that never rises, W data never taken) are not covered: the gate cannot withdraw them.
The master's ``rvalid`` / ``bvalid`` and the slave's ``rready`` / ``bready`` gain one gate
whose other input is a register (``drop_r`` / ``drop_b``: a stale response is owed, or
``expired``).
"""
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature
from .lib.up_down import up_down

__all__ = ["AXI4Quiesce"]

_GATED = ("arvalid", "arready", "awvalid", "awready", "wvalid", "wready")


class AXI4Quiesce(wiring.Component):
    """Parameters: ``addr_width``, ``data_width``, ``id_width`` (as `AXI4Signature`);
    ``max_in_flight``: a bound on the master's outstanding transactions (sizes the counters);
    ``timeout``: the watchdog's cycles without a response (None: no watchdog)."""

    def __init__(self, addr_width, data_width, id_width=1, max_in_flight=256, timeout=None):
        if timeout is not None and timeout < 2:
            raise ValueError(f"timeout must be None or >= 2 cycles, not {timeout}")
        self.max_in_flight, self.timeout = max_in_flight, timeout
        sig = AXI4Signature(addr_width, data_width, id_width)
        super().__init__({"m": In(sig), "s": Out(sig), "hold": In(1), "quiet": Out(1),
                          "expired": Out(1)})

    def elaborate(self, platform):
        m = Module()
        mst, slv = self.m, self.s
        # responses owed to a master the watchdog gave up on: taken here, hidden from it
        n = self.max_in_flight
        stale_r, stale_b = (Signal(range(n + 1), name=f"stale_{x}") for x in "rb")
        drop_r, drop_b = Signal(name="drop_r"), Signal(name="drop_b")
        for name, member in self.s.signature.members.items():
            if name in ("rvalid", "bvalid"):
                drop = drop_r if name == "rvalid" else drop_b
                m.d.comb += getattr(mst, name).eq(getattr(slv, name) & ~drop)
            elif name in ("rready", "bready"):
                drop = drop_r if name == "rready" else drop_b
                m.d.comb += getattr(slv, name).eq(getattr(mst, name) | drop)
            elif name not in _GATED:
                src, dst = (mst, slv) if member.flow == Out else (slv, mst)
                m.d.comb += getattr(dst, name).eq(getattr(src, name))
        closed = {ch: Signal(name=f"closed_{ch}") for ch in ("ar", "aw", "w")}
        for ch, c in closed.items():
            m.d.comb += [getattr(slv, f"{ch}valid").eq(getattr(mst, f"{ch}valid") & ~c),
                         getattr(mst, f"{ch}ready").eq(getattr(slv, f"{ch}ready") & ~c)]

        reads, writes = Signal(range(n + 1), name="reads"), Signal(range(n + 1), name="writes")
        w_ahead = Signal(range(-n, n + 1))  # W bursts completed minus AWs taken
        w_mid = Signal()                    # a W burst has begun and not ended
        ar = slv.arvalid & slv.arready
        aw = slv.awvalid & slv.awready
        w = slv.wvalid & slv.wready
        r_beat = slv.rvalid & slv.rready
        r_last = r_beat & slv.rlast & ~drop_r    # a dropped response is not the master's
        b = slv.bvalid & slv.bready & ~drop_b
        w_ahead_next, w_mid_next = Signal.like(w_ahead), Signal()
        m.d.comb += [w_ahead_next.eq(up_down(w_ahead, w & mst.wlast, aw)),
                     w_mid_next.eq(Mux(w, ~mst.wlast, w_mid))]
        # The in-flight counts take the handshakes a cycle late, from registers (timing: the
        # master's late arvalid into the counter's enable was a 9.6 ns path); ``quiet`` waits
        # for a registered AR or AW too.
        late = {name: Signal(name=f"{name}_taken") for name in ("ar", "r_last", "aw", "b")}
        m.d.sync += [late["ar"].eq(ar), late["r_last"].eq(r_last), late["aw"].eq(aw),
                     late["b"].eq(b)]
        reads_next = up_down(reads, late["ar"], late["r_last"])
        writes_next = up_down(writes, late["aw"], late["b"])
        m.d.sync += [w_ahead.eq(w_ahead_next), w_mid.eq(w_mid_next)]
        requests_done = Signal(name="requests_done")   # only responses may be owed
        m.d.sync += [reads.eq(reads_next), writes.eq(writes_next)]
        # drop_r / drop_b are registers, loaded with what (stale != 0) | expired will be: as
        # a compare of the stale counts they were the critical path of the whole accelerator
        # at every nextpnr seed (stale_b -> drop_b -> bvalid -> the write engine -> the DMA's
        # done payload, 10.1-10.5 ns). The same values, a cycle earlier.
        stale_r_next = up_down(stale_r, 0, r_beat & slv.rlast & drop_r)
        stale_b_next = up_down(stale_b, 0, slv.bvalid & drop_b)
        stale_r_d, stale_b_d = Signal.like(stale_r), Signal.like(stale_b)   # their D inputs
        m.d.comb += [stale_r_d.eq(stale_r_next), stale_b_d.eq(stale_b_next)]
        expired_next = C(0)
        owed_r, owed_b = stale_r_next != 0, stale_b_next != 0   # stale_r_d / stale_b_d != 0
        if self.timeout is not None:
            expired_next = self._watchdog(m, requests_done & ((reads != 0) | (writes != 0)),
                                          r_beat | (slv.bvalid & slv.bready))
            # In the cycle expired is high, the handshakes of the cycle before are in
            # reads_next / writes_next; a response in this cycle is dropped as a stale one.
            with m.If(self.expired):
                m.d.sync += [reads.eq(0), writes.eq(0)]
                m.d.comb += [stale_r_d.eq(stale_r_next + reads_next),
                             stale_b_d.eq(stale_b_next + writes_next)]
            # A sum of two counts is nonzero when either is: the drops without the adders
            # (timing: ``writes`` through writes_next and the sum into drop_b, 9.69 ns at
            # seed 3 of the 1-lane top asked for 106 MHz)
            owed_r = owed_r | (self.expired & (reads_next != 0))
            owed_b = owed_b | (self.expired & (writes_next != 0))
        m.d.sync += [stale_r.eq(stale_r_d), stale_b.eq(stale_b_d),
                     drop_r.eq(owed_r | expired_next), drop_b.eq(owed_b | expired_next)]

        # A channel may close where the slave is not mid-offer. W never closes inside a burst,
        # and stays open while a taken AW owes its data; AW stays open while a W burst has no
        # AW yet.
        aw_needed = w_ahead_next > 0
        w_needed = (w_ahead_next < 0) | w_mid_next
        for ch, needed in (("ar", C(0)), ("aw", aw_needed), ("w", w_needed)):
            boundary = ~getattr(slv, f"{ch}valid") | getattr(slv, f"{ch}ready")
            m.d.sync += closed[ch].eq(self.hold & boundary & ~needed)
        m.d.comb += [requests_done.eq(self.hold & closed["ar"] & closed["aw"] & closed["w"]
                                      & ~late["ar"] & ~late["aw"] & (w_ahead == 0) & ~w_mid),
                     self.quiet.eq(requests_done & (reads == 0) & (writes == 0))]
        return m

    def _watchdog(self, m, owed, response):
        """``expired``, a register: high for one cycle after ``owed`` (responses owed, nothing
        else) held for ``timeout`` cycles without a ``response`` (an R or B handshake).
        Returns its next value."""
        left = Signal(range(self.timeout + 1), init=self.timeout, name="watchdog_left")
        with m.If(~owed | response | self.expired):
            m.d.sync += left.eq(self.timeout)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        expired_next = Signal(name="expired_next")
        m.d.comb += expired_next.eq(owed & (left == 1) & ~response & ~self.expired)
        m.d.sync += self.expired.eq(expired_next)
        return expired_next
