"""lagged_count: an event counter whose increment is registered before the adder."""
from amaranth.hdl import Mux, Signal, Value

__all__ = ["lagged_count"]


def lagged_count(m, counter, inc, clear, name):
    """Adds ``inc`` to the wrapping ``counter`` one cycle late, and zeroes it one cycle after
    ``clear`` (the counter lags its events by one cycle; an event in the clearing cycle
    counts after the clear). Both are registers next to the counter, so the event logic and
    the clear's source drive one flip-flop each, not the adder and every bit (timing). The
    clear selects after the adder, not in front of its carry chain (timing: a 48-bit carry
    chain behind the clear was a critical path). ``name`` names the registers."""
    inc_r = Signal(len(Value.cast(inc)), name=f"{name}_inc")
    clear_r = Signal(name=f"{name}_clear")
    m.d.sync += [inc_r.eq(inc), clear_r.eq(clear),
                 counter.eq(Mux(clear_r, inc_r, counter + inc_r))]
