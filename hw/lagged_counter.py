"""lagged_count: an event counter whose increment is registered before the adder."""
from amaranth.hdl import Mux, Signal, Value

__all__ = ["lagged_count"]


def lagged_count(m, counter, inc, clear, name):
    """Adds ``inc`` to the wrapping ``counter`` one cycle late (the counter lags the events by
    one cycle): the increment is a register, so the event logic drives one flip-flop per
    counter instead of the adder and every bit's enable (timing). ``clear`` zeroes the counter;
    the increment registered in the clearing cycle (the previous cycle's event) still counts.
    ``name`` names the increment register."""
    inc_r = Signal(len(Value.cast(inc)), name=f"{name}_inc")
    m.d.sync += [inc_r.eq(inc), counter.eq(Mux(clear, 0, counter) + inc_r)]
