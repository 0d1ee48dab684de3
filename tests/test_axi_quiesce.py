"""AXI4Quiesce between a random AXI4 master and a random slave, each a cycle model with its own
bookkeeping: the slave never sees a valid withdrawn or a beat changed while offered, every
transaction the slave took completes, a held gate goes ``quiet`` within a bound (also with W
bursts running ahead of their AW), and when it is quiet the slave is owed nothing and offered
nothing."""
import random
from collections import deque

import pytest

from helpers import simulate
from hotline.hw.axi_quiesce import AXI4Quiesce

QUIET_BOUND = 400   # cycles from hold to quiet with this traffic (bursts of <= 8 beats)
TIMEOUT = 40        # the watchdog: far above this slave's gaps between responses


class Master:
    """Issues reads and writes (W possibly before its AW: ``w_first``), holds each valid until
    taken, takes R and B beats at random."""

    def __init__(self, rng, w_first):
        self.rng, self.w_first = rng, w_first
        self.ar = None              # arlen of the AR offered
        self.writes = deque()       # [awlen, aw_sent, beats_sent], in issue order
        self.aw_offer = None

    def drive(self, ctx, m):
        rng = self.rng
        if self.ar is None and rng.random() < 0.3:
            self.ar = rng.randrange(8)
        if len(self.writes) < 6 and rng.random() < 0.25:
            self.writes.append([rng.randrange(8), False, 0])
        # An AW is offered late at times (and then held until taken), so W bursts run ahead.
        aw = next((wr for wr in self.writes if not wr[1]), None)
        if aw is not None and aw is not self.aw_offer and rng.random() < 0.7:
            aw = None
        w = next((wr for wr in self.writes if wr[2] <= wr[0]), None)
        if w is not None and not w[1] and not self.w_first:
            w = None   # this master sends a burst's W beats only after its AW
        self.aw_offer, self.w_offer = aw, w
        ctx.set(m.arvalid, self.ar is not None)
        ctx.set(m.arlen, self.ar or 0)
        ctx.set(m.awvalid, aw is not None)
        ctx.set(m.awlen, aw[0] if aw else 0)
        ctx.set(m.wvalid, w is not None)
        ctx.set(m.wlast, w is not None and w[2] == w[0])
        ctx.set(m.wdata, (w[2] if w else 0) | (id(w) & 0xFFFF) << 8)
        ctx.set(m.rready, rng.random() < 0.8)
        ctx.set(m.bready, rng.random() < 0.8)

    def update(self, s):
        if s["m.arvalid"] and s["m.arready"]:
            self.ar = None
        if s["m.awvalid"] and s["m.awready"]:
            self.aw_offer[1] = True
        if s["m.wvalid"] and s["m.wready"]:
            self.w_offer[2] += 1
        while self.writes and self.writes[0][1] and self.writes[0][2] > self.writes[0][0]:
            self.writes.popleft()


class Slave:
    """Takes AR/AW/W at random, answers R bursts and B responses in order; checks that an
    offered beat stays offered, unchanged, until taken; keeps its own count of what it owes."""

    def __init__(self, rng):
        self.rng = rng
        self.reads = deque()        # beats left per read taken
        self.aws = deque()          # awlen per AW not yet paired with its W burst
        self.bursts = deque()       # beats per complete W burst not yet paired with an AW
        self.w_beats = 0            # beats of the W burst under way
        self.b_owed = 0
        self.prev = {}

    def owed(self):
        return bool(self.reads or self.aws or self.bursts or self.w_beats or self.b_owed)

    def drive(self, ctx, s):
        rng = self.rng
        ctx.set(s.arready, rng.random() < 0.5)
        ctx.set(s.awready, rng.random() < 0.5)
        ctx.set(s.wready, rng.random() < 0.6)
        ctx.set(s.rvalid, bool(self.reads))
        ctx.set(s.rlast, bool(self.reads) and self.reads[0] == 1)
        ctx.set(s.bvalid, self.b_owed > 0)

    def update(self, v):
        for ch, payload in (("ar", "s.arlen"), ("aw", "s.awlen"), ("w", "s.wdata")):
            was = self.prev.get(ch)
            if was is not None:
                assert v[f"s.{ch}valid"], f"the slave saw {ch}valid withdrawn"
                assert v[payload] == was, f"the slave saw an offered {ch} beat change"
            offered = v[f"s.{ch}valid"] and not v[f"s.{ch}ready"]
            self.prev[ch] = v[payload] if offered else None
        if v["s.arvalid"] and v["s.arready"]:
            self.reads.append(v["s.arlen"] + 1)
        if v["s.rvalid"] and v["s.rready"]:
            self.reads[0] -= 1
            if not self.reads[0]:
                self.reads.popleft()
        if v["s.awvalid"] and v["s.awready"]:
            self.aws.append(v["s.awlen"])
        if v["s.wvalid"] and v["s.wready"]:
            self.w_beats += 1
            if v["s.wlast"]:
                self.bursts.append(self.w_beats)
                self.w_beats = 0
        while self.aws and self.bursts:
            assert self.bursts.popleft() == self.aws.popleft() + 1, "a W burst of the wrong length"
            self.b_owed += 1
        if v["s.bvalid"] and v["s.bready"]:
            self.b_owed -= 1


SAMPLED = ["m.arvalid", "m.arready", "m.awvalid", "m.awready", "m.wvalid", "m.wready",
           "s.arvalid", "s.arready", "s.arlen", "s.awvalid", "s.awready", "s.awlen",
           "s.wvalid", "s.wready", "s.wdata", "s.wlast", "s.rvalid", "s.rready", "s.bvalid",
           "s.bready", "quiet", "expired"]


@pytest.mark.parametrize("w_first", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_hold_lets_transactions_finish_and_starts_none(w_first, seed):
    rng = random.Random(seed)
    dut = AXI4Quiesce(32, 64, timeout=TIMEOUT)   # legal traffic never trips it
    log = {"quiet_phases": 0, "traffic": 0}

    def sig(name):
        if name in ("quiet", "expired"):
            return getattr(dut, name)
        side, field = name.split(".")
        return getattr(getattr(dut, side), field)

    async def bench(ctx):
        master, slave = Master(rng, w_first), Slave(rng)
        for phase in range(40):
            hold = phase % 2 == 1
            ctx.set(dut.hold, hold)
            quiet_at = None
            for cycle in range(QUIET_BOUND if hold else rng.randrange(20, 200)):
                master.drive(ctx, dut.m)
                slave.drive(ctx, dut.s)
                vals = (await ctx.tick().sample(*(sig(n) for n in SAMPLED)))[-len(SAMPLED):]
                v = dict(zip(SAMPLED, (int(x) for x in vals)))
                log["traffic"] += v["s.arvalid"] and v["s.arready"]
                assert not v["expired"], "the watchdog fired on a slave that answers"
                if v["quiet"]:
                    assert hold
                    assert not (v["s.arvalid"] or v["s.awvalid"] or v["s.wvalid"]), \
                        "quiet while the slave is offered a request"
                    assert not slave.owed(), "quiet while the slave still owes a response"
                    quiet_at = cycle if quiet_at is None else quiet_at
                elif quiet_at is not None:
                    raise AssertionError("quiet fell while hold was high")
                slave.update(v)
                master.update(v)
            if hold:
                assert quiet_at is not None, f"not quiet {QUIET_BOUND} cycles after hold"
                log["quiet_phases"] += 1

    simulate(dut, bench)
    assert log["quiet_phases"] == 20 and log["traffic"] > 50


@pytest.mark.parametrize("order", ["ar", "aw then w", "w then aw"])
def test_not_quiet_while_the_request_taken_as_hold_rises_is_owed(order):
    """Directed: the only request of the run is taken in the cycle ``hold`` rises (the channel
    closes at that boundary), its W beat before or after it. ``quiet`` stays low until its
    response has been taken (R last, or B)."""
    dut = AXI4Quiesce(32, 64)

    async def take(ctx, *pairs):
        """One cycle with these (side.valid, side.ready) handshakes (and wlast)."""
        sigs = [sig for pair in pairs for sig in pair]
        for sig in sigs:
            ctx.set(sig, 1)
        await ctx.tick()
        for sig in sigs:
            ctx.set(sig, 0)

    async def bench(ctx):
        w_beat = (dut.m.wvalid, dut.s.wready, dut.m.wlast)
        await ctx.tick().repeat(3)
        if order == "w then aw":
            await take(ctx, w_beat)
        ctx.set(dut.hold, 1)
        ch = "ar" if order == "ar" else "aw"
        await take(ctx, (getattr(dut.m, f"{ch}valid"), getattr(dut.s, f"{ch}ready")))
        if order == "aw then w":
            await take(ctx, w_beat)
        for _ in range(10):    # the response is owed
            assert not ctx.get(dut.quiet)
            await ctx.tick()
        await take(ctx, (dut.s.rvalid, dut.m.rready, dut.s.rlast) if ch == "ar" else
                   (dut.s.bvalid, dut.m.bready))
        await ctx.tick().repeat(4)
        assert ctx.get(dut.quiet)

    simulate(dut, bench)


@pytest.mark.parametrize("hung", ["b", "r"])
def test_watchdog_gives_up_a_hung_response_and_drops_it_later(hung):
    """Directed: a write whose B response (or a 4-beat read that stops after 2 beats) does not
    come while ``hold`` is high. ``expired`` strobes once ``TIMEOUT`` cycles after the last
    response and ``quiet`` rises; the late response is then taken by the gate and never shown
    to the master; after ``hold`` falls a new read and write pass with their responses."""
    dut = AXI4Quiesce(32, 64, timeout=TIMEOUT)
    m, s = dut.m, dut.s

    async def handshake(ctx, valid, ready, *extra):
        for sig in (valid, ready, *extra):
            ctx.set(sig, 1)
        await ctx.tick()
        for sig in (valid, ready, *extra):
            ctx.set(sig, 0)

    async def bench(ctx):
        await ctx.tick().repeat(2)
        if hung == "b":
            await handshake(ctx, m.awvalid, s.awready)
            await handshake(ctx, m.wvalid, s.wready, m.wlast)
        else:
            ctx.set(m.arlen, 3)
            await handshake(ctx, m.arvalid, s.arready)
            for _ in range(2):
                await handshake(ctx, s.rvalid, m.rready)
        ctx.set(dut.hold, 1)
        ctx.set(m.rready, 1)
        ctx.set(m.bready, 1)
        expired_at = quiet_at = None
        for cycle in range(3 * TIMEOUT):
            if ctx.get(dut.expired):
                assert expired_at is None, "expired twice"
                expired_at = cycle
            if ctx.get(dut.quiet) and quiet_at is None:
                quiet_at = cycle
            await ctx.tick()
        assert expired_at is not None and TIMEOUT <= expired_at <= TIMEOUT + 4, expired_at
        assert quiet_at is not None and quiet_at <= expired_at + 3 and ctx.get(dut.quiet)
        ctx.set(dut.hold, 0)
        ctx.set(m.rready, 0)
        ctx.set(m.bready, 0)
        await ctx.tick().repeat(2)
        # the late response: taken from the slave by the gate, invisible to the master
        if hung == "b":
            ctx.set(s.bvalid, 1)
            assert ctx.get(s.bready) and not ctx.get(m.bvalid)
            await ctx.tick()
            ctx.set(s.bvalid, 0)
        else:
            for last in (0, 1):
                ctx.set(s.rvalid, 1)
                ctx.set(s.rlast, last)
                assert ctx.get(s.rready) and not ctx.get(m.rvalid)
                await ctx.tick()
            ctx.set(s.rvalid, 0)
            ctx.set(s.rlast, 0)
        # a new read and write, after the master was reset: their responses reach it
        await handshake(ctx, m.arvalid, s.arready)
        await handshake(ctx, m.awvalid, s.awready)
        await handshake(ctx, m.wvalid, s.wready, m.wlast)
        ctx.set(s.rvalid, 1)
        ctx.set(s.rlast, 1)
        ctx.set(s.bvalid, 1)
        assert ctx.get(m.rvalid) and ctx.get(m.bvalid)
        assert not ctx.get(s.rready) and not ctx.get(s.bready)   # the master's ready again
        await handshake(ctx, m.rready, m.bready)
        ctx.set(s.rvalid, 0)
        ctx.set(s.bvalid, 0)
        ctx.set(dut.hold, 1)
        await ctx.tick().repeat(5)
        assert ctx.get(dut.quiet), "the new transactions left something owed"

    simulate(dut, bench)


@pytest.mark.parametrize("hung", ["b", "r"])
@pytest.mark.parametrize("after", [0, 1, 2])
def test_a_stale_response_at_the_expiry_is_dropped(hung, after):
    """The hung response comes ``after`` cycles from the ``expired`` strobe (0: in that cycle),
    with the master ready: the gate takes it and the master never sees it. ``drop_r`` /
    ``drop_b`` are registers loaded a cycle ahead; one a cycle late leaks this response."""
    dut = AXI4Quiesce(32, 64, timeout=TIMEOUT)
    m, s = dut.m, dut.s

    async def bench(ctx):
        await ctx.tick().repeat(2)
        if hung == "b":
            pairs = [(m.awvalid, s.awready), (m.wvalid, s.wready, m.wlast)]
        else:
            ctx.set(m.arlen, 1)
            pairs = [(m.arvalid, s.arready)]
        for sigs in pairs:
            for sig in sigs:
                ctx.set(sig, 1)
            await ctx.tick()
            for sig in sigs:
                ctx.set(sig, 0)
        ctx.set(dut.hold, 1)
        ctx.set(m.rready, 1)
        ctx.set(m.bready, 1)
        for _ in range(3 * TIMEOUT):
            if ctx.get(dut.expired):
                break
            await ctx.tick()
        assert ctx.get(dut.expired)
        for _ in range(after):
            await ctx.tick()
        valid = s.bvalid if hung == "b" else s.rvalid
        for last in ((1,) if hung == "b" else (0, 1)):
            ctx.set(valid, 1)
            ctx.set(s.rlast, last)
            assert ctx.get(s.bready if hung == "b" else s.rready), "the gate did not take it"
            assert not ctx.get(m.bvalid) and not ctx.get(m.rvalid), "the master saw it"
            await ctx.tick()
        ctx.set(valid, 0)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.quiet)

    simulate(dut, bench)
