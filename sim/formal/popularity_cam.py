"""Property 3 (issue 43) on `PopularityCAM` (its `CAMCommandEngine` and `CAMLookupPipeline`,
unmodified), in a small geometry (`GEOMETRY`: 2 tables x 2 buckets x 2 ways, a stash of 1,
3-bit keys, 2 kicks):

- no key is present twice (table entries and stash, whenever the engine is idle and no
  write is under way), and every table entry lies in its key's bucket of its table;
- an INSERT answered OK leaves its key at the slot it reports and the set of keys = the
  set before + the key (relocations move keys, never lose or add one); EXISTS: the key was
  there, at the slot reported, and nothing changed; FULL: the key was absent and nothing
  changed (a refused insert changes nothing that was there);
- a DELETE answered OK was of the key at the slot it reports and frees exactly that entry,
  every other entry as it was; NOT_FOUND: the key was absent and nothing changed;
- CLEAR answers OK and leaves every entry free;
- every lookup answers from the table as it stands: hit exactly when the key is in one of
  its two buckets or the stash, at that slot. With the above, a successful insert is found
  by the next lookup.

The wrapper elaborates the CAM itself to reach its engine (``submodules.engine``): the
shadow of the tables follows the engine's write ports (the tables' only writer), the stash
is the engine's ``pipe.stash_valid`` / ``pipe.stash_key``. A command's check runs once its
response is taken and its last write has landed. Lookups carry their key in ``user``; a
result is checked when no table write and no busy engine came between its lookup and it
(those see the table of their lookup: ordering, not content).

Assumptions: no reset after the start; valid ops only (INSERT, DELETE, CLEAR); ``user`` =
the lookup's key (the sideband is the wrapper's); ``result.ready`` high: the consumer never
stalls (the result queue's no-loss / no-duplication is a stream property, 5; with stalls
free the depth-26 check took 42 s instead of 5.5 s). Free: every key, command and lookup
order, every other ready / valid timing (``cmd``, ``resp``, ``moves``, ``lookup``).

Why the small geometry stands for the product's (16384 entries, 8 ways, 32-bit keys, stash
4, 64 kicks): the engine's and the pipeline's logic is the same per entry, per way and per
stash entry (generated loops over ``ways``, ``stash``, ``max_kicks``; the key compares are
byte parts and'ed), the hashes are only bucket addresses (a key's two buckets are all the
property names), and the bucket, way and key widths change no control path. What the depth
does not reach (two commands take 26 steps, each one more about 12): a key in table 1 needs
its table-0 bucket full (2 inserts first), relocations and the stash both of its buckets
(4), FULL 9 keys; those are only simulated (tests/test_popularity_cam*).
"""
from amaranth import *
from amaranth.hdl import Assert, Assume, Cover

import hotline.hw.cam_command_engine as block
import hotline.hw.popularity_cam as cam_module
from hotline.contract.cam import CAMOp, CAMStatus

from .mutation import mutant
from .runner import free_inputs

__all__ = ["CAMProperty", "GEOMETRY", "MUTATIONS"]

GEOMETRY = dict(entries=8, ways=2, key_width=3, user_width=3, stash=1, max_kicks=2)

# name -> (source text of hw/cam_command_engine.py, its replacement)
MUTATIONS = {
    # an insert of a key already in the table goes in again
    "duplicate_insert": ("with m.Elif(in_table_r | in_stash):", "with m.Elif(in_stash):"),
    # a delete frees the other way of the key's bucket
    "delete_wrong_way": ("m.d.comb += [self.write.en[t].eq(found_r[t]) for t in tables]",
                         "m.d.comb += [self.write.en[t].eq(found_r[t].rotate_left(1))"
                         " for t in tables]"),
    # a delete of an absent key answers OK (and clears nothing)
    "delete_absent_ok": ("with m.If(in_table_r):\n                    m.d.comb += [self.write.addr",
                         "with m.If(1):\n                    m.d.comb += [self.write.addr"),
    # an insert placed in the other bucket of its table: lookups miss it
    "insert_wrong_bucket": ("free_slot_r[t].eq(Cat(free_way, home[t], C(t, 1)))",
                            "free_slot_r[t].eq(Cat(free_way, ~home[t], C(t, 1)))"),
}


def _cam_class(engine_module):
    """PopularityCAM built with ``engine_module``'s CAMCommandEngine (the block or a mutant)."""
    if engine_module is block:
        return cam_module.PopularityCAM
    copy = mutant(cam_module, "from .cam_command_engine import CAMCommandEngine\n", "\n")
    copy.CAMCommandEngine = engine_module.CAMCommandEngine
    return copy.PopularityCAM


class CAMProperty(Elaboratable):
    """The wrapper; ``module`` is `hotline.hw.cam_command_engine` or a mutant of it."""

    def __init__(self, module=block):
        self.dut = _cam_class(module)(**GEOMETRY)
        self.ports = free_inputs(self.dut)

    def elaborate(self, platform):
        m = Module()
        dut = self.dut
        m.submodules.dut = inner = dut.elaborate(platform)
        dut._MustUse__used = True     # elaborated here, not by Fragment.get: no warning
        engine = inner.submodules.engine
        g = dut.geometry
        m.d.comb += [Assume(~ResetSignal()),
                     Assume(dut.cmd.payload.op.as_value() <= CAMOp.CLEAR.value),
                     Assume(dut.lookup.payload.user == dut.lookup.payload.key[0]),
                     Assume(dut.result.ready)]

        # ---- shadow of the tables (from the write ports) and the stash ----------------------
        entries = []     # (valid, key, slot, table or None, bucket)
        for t in (0, 1):
            for b in range(g.buckets):
                for w in range(g.ways):
                    valid, key = Signal(name=f"t{t}b{b}w{w}_v"), Signal(g.key_width,
                                                                          name=f"t{t}b{b}w{w}_k")
                    with m.If(engine.write_en[t][w] & (engine.write_addr[t] == b)):
                        m.d.sync += [valid.eq(engine.write_data.valid),
                                     key.eq(engine.write_data.key)]
                    entries.append((valid, key, (t * g.buckets + b) * g.ways + w, t, b))
        for i in range(g.stash):
            entries.append((engine.pipe.stash_valid[i], engine.pipe.stash_key[i],
                            g.entries + i, None, None))
        writing = Cat(engine.write_en[0], engine.write_en[1]).any()
        idle = engine.pipe.idle
        settled = idle & ~writing

        def present(valids, keys, key):
            return Cat(v & (k == key) for v, k in zip(valids, keys)).any()

        def at(valids, keys, slot, key):
            return Cat(v & (k == key) & (slot == s)
                       for v, k, (_, _, s, _, _) in zip(valids, keys, entries)).any()

        valids = [e[0] for e in entries]
        keys = [e[1] for e in entries]
        with m.If(settled):
            for i in range(len(entries)):
                for j in range(i + 1, len(entries)):
                    m.d.comb += Assert(~(valids[i] & valids[j] & (keys[i] == keys[j])))
            for valid, key, _, t, b in entries:
                if t is not None:
                    m.d.comb += Assert(~valid | (g.hash(t, key) == b))

        # ---- commands: the table before, the response, the table after ------------------
        before_v = [Signal(name=f"before{i}_v") for i in range(len(entries))]
        before_k = [Signal(g.key_width, name=f"before{i}_k") for i in range(len(entries))]
        op, key = Signal(CAMOp), Signal(g.key_width)
        status, slot = Signal(CAMStatus), Signal(g.slot_width)
        done = Signal()
        with m.If(dut.cmd.valid & dut.cmd.ready):
            m.d.sync += [op.eq(dut.cmd.payload.op), key.eq(dut.cmd.payload.key),
                         *(b.eq(v) for b, v in zip(before_v, valids)),
                         *(b.eq(k) for b, k in zip(before_k, keys))]
        resp = dut.resp.payload
        with m.If(dut.resp.valid & dut.resp.ready):
            m.d.sync += [done.eq(1), status.eq(resp.status), slot.eq(resp.slot)]
        checked = done & settled
        with m.If(checked):
            m.d.sync += done.eq(0)

        unchanged = Cat((v == bv) & (~v | (k == bk))
                        for v, k, bv, bk in zip(valids, keys, before_v, before_k)).all()
        was_there = present(before_v, before_k, key)
        with m.If(checked):
            with m.Switch(op):
                with m.Case(CAMOp.INSERT):
                    with m.Switch(status):
                        with m.Case(CAMStatus.OK):
                            m.d.comb += [
                                Assert(~was_there), Assert(at(valids, keys, slot, key)),
                                *(Assert(~v | (k == key) | present(before_v, before_k, k))
                                  for v, k in zip(valids, keys)),
                                *(Assert(~bv | present(valids, keys, bk))
                                  for bv, bk in zip(before_v, before_k))]
                        with m.Case(CAMStatus.EXISTS):
                            m.d.comb += [Assert(at(before_v, before_k, slot, key)),
                                         Assert(unchanged)]
                        with m.Case(CAMStatus.FULL):
                            m.d.comb += [Assert(~was_there), Assert(unchanged)]
                        with m.Default():
                            m.d.comb += Assert(0)
                with m.Case(CAMOp.DELETE):
                    with m.Switch(status):
                        with m.Case(CAMStatus.OK):
                            m.d.comb += Assert(at(before_v, before_k, slot, key))
                            for v, k, bv, bk, (_, _, s, _, _) in zip(valids, keys, before_v,
                                                                     before_k, entries):
                                m.d.comb += Assert(Mux(slot == s, ~v,
                                                       (v == bv) & (~v | (k == bk))))
                        with m.Case(CAMStatus.NOT_FOUND):
                            m.d.comb += [Assert(~was_there), Assert(unchanged)]
                        with m.Default():
                            m.d.comb += Assert(0)
                with m.Case(CAMOp.CLEAR):
                    m.d.comb += [Assert(status == CAMStatus.OK), Assert(~Cat(valids).any())]

        # ---- lookups: each result against the table it was looked up in ------------------
        taken = dut.lookup.valid & dut.lookup.ready
        given = dut.result.valid & dut.result.ready
        outstanding = Signal(6)
        stale = Signal(6)   # the next results to come that a change overtook
        m.d.sync += outstanding.eq(outstanding + taken - given)
        with m.If(writing | ~idle):
            m.d.sync += stale.eq(outstanding - given)
        with m.Elif(given & (stale != 0)):
            m.d.sync += stale.eq(stale - 1)
        want = dut.result.payload.user
        homes = [(e, (e[3] is None) or (g.hash(e[3], want) == e[4])) for e in entries]
        hit = Cat(v & (k == want) & home for (v, k, _, _, _), home in homes).any()
        want_slot = Cat(v & (k == want) & home & (dut.result.payload.slot[0] == s)
                        for (v, k, s, _, _), home in homes).any()
        with m.If(given & (stale == 0)):
            m.d.comb += [Assert(dut.result.payload.hit[0] == hit),
                         Assert(~hit | want_slot)]

        # not vacuous: a lookup finds a key, a delete frees one
        m.d.comb += [Cover(given & (stale == 0) & dut.result.payload.hit[0]),
                     Cover(checked & (op == CAMOp.DELETE) & (status == CAMStatus.OK))]
        return m
