"""ECP5 PLL (EHXPLLL): divider settings from wanted frequencies, and the primitive as an Instance.

`ecp5_pll(clkin_hz, [f0, f1, ...])` searches every EHXPLLL setting with feedback from CLKOP
(``FEEDBK_PATH="CLKOP"``, the CLKFB pin tied to CLKOP), where

    PFD   = clkin / CLKI_DIV                       3.125 .. 400 MHz
    CLKOP = PFD * CLKFB_DIV                        (the feedback loop locks CLKOP to it)
    VCO   = CLKOP * CLKOP_DIV                      400 .. 800 MHz
    CLKOSn = VCO / CLKOSn_DIV                      every output 3.125 .. 400 MHz

with each divider 1 .. 128 (Lattice TN1263 and DS1044; the same ranges as Project Trellis'
``ecppll`` and LiteX's ``ECP5PLL``). Output 0 is CLKOP, outputs 1..3 are CLKOS, CLKOS2, CLKOS3.
It returns the setting whose achieved frequencies (exact fractions) are nearest the wanted
ones (the largest relative error first, then their sum); ties go to the higher PFD (less
jitter, within LiteX's stricter 10 MHz floor when possible), then the VCO nearest 600 MHz.

`ECP5PLL(settings)` is the primitive: ``clkin`` In, ``clk`` Out (one clock per output),
``locked`` Out (the LOCK pin). Its nextpnr attributes are ecppll's (FREQUENCY_PIN_* for the
derived clock constraints, the loop-filter settings).
"""
import functools
from dataclasses import dataclass
from fractions import Fraction

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PLLSettings", "ecp5_pll", "ECP5PLL", "OUTPUTS", "PFD_HZ", "VCO_HZ", "OUT_HZ", "DIVS"]

OUTPUTS = ("CLKOP", "CLKOS", "CLKOS2", "CLKOS3")
PFD_HZ = (3_125_000, 400_000_000)
VCO_HZ = (400_000_000, 800_000_000)
OUT_HZ = (3_125_000, 400_000_000)
DIVS = range(1, 129)


@dataclass(frozen=True)
class PLLSettings:
    """One EHXPLLL setting: ``clkin_hz``; ``clki_div``, ``clkfb_div``; ``out_divs`` (CLKOP's,
    then CLKOS's ...); ``wanted_hz`` (what was asked, per output). Derived: ``pfd_hz``,
    ``vco_hz``, ``out_hz`` (exact `Fraction`s), ``exact`` (every output as wanted)."""
    clkin_hz: int
    clki_div: int
    clkfb_div: int
    out_divs: tuple
    wanted_hz: tuple

    @property
    def pfd_hz(self):
        return Fraction(self.clkin_hz, self.clki_div)

    @property
    def vco_hz(self):
        return self.pfd_hz * self.clkfb_div * self.out_divs[0]

    @property
    def out_hz(self):
        return tuple(self.vco_hz / d for d in self.out_divs)

    @property
    def exact(self):
        return all(got == want for got, want in zip(self.out_hz, self.wanted_hz))

    def report(self):
        """A JSON-able summary: dividers, PFD, VCO, and each output's wanted and achieved Hz."""
        return {"clkin_hz": self.clkin_hz, "clki_div": self.clki_div, "clkfb_div": self.clkfb_div,
                "pfd_hz": float(self.pfd_hz), "vco_hz": float(self.vco_hz),
                "outputs": [{"pin": pin, "div": div, "wanted_hz": want, "hz": float(got),
                             "ppm": float((got - want) / want * 10**6)}
                            for pin, div, want, got in zip(OUTPUTS, self.out_divs, self.wanted_hz,
                                                           self.out_hz)]}


def _within(f, bounds):
    return bounds[0] <= f <= bounds[1]


def ecp5_pll(clkin_hz, wanted_hz):
    """The best `PLLSettings` for ``wanted_hz`` (1 to 4 output frequencies, CLKOP first) from
    ``clkin_hz``; raises ValueError when no setting respects the ranges. Results are cached."""
    return _search(int(clkin_hz), tuple(int(f) for f in wanted_hz))


@functools.lru_cache(maxsize=None)
def _search(clkin_hz, wanted):
    if not 1 <= len(wanted) <= len(OUTPUTS):
        raise ValueError(f"an EHXPLLL has 1 to {len(OUTPUTS)} outputs, not {len(wanted)}")
    if not _within(clkin_hz, (8_000_000, 400_000_000)):
        raise ValueError(f"EHXPLLL input must be 8..400 MHz, not {clkin_hz / 1e6:g} MHz")
    # Floats prune; errors are ratios of exact integers, so an exact output's is 0.0.
    best, best_key = None, None
    for clki_div in DIVS:
        pfd = clkin_hz / clki_div
        if pfd < PFD_HZ[0]:
            break
        if pfd > PFD_HZ[1]:
            continue
        for clkfb_div in DIVS:
            clkop = pfd * clkfb_div
            if clkop > OUT_HZ[1]:
                break
            if clkop < OUT_HZ[0]:
                continue
            for op_div in DIVS:
                vco = clkop * op_div
                if vco > VCO_HZ[1]:
                    break
                if vco < VCO_HZ[0]:
                    continue
                divs = [op_div]
                for f in wanted[1:]:
                    # the two integer dividers around VCO / f, each clamped to a legal output
                    near = {max(1, min(128, int(vco / f))), max(1, min(128, int(vco / f) + 1))}
                    near = [d for d in near if _within(vco / d, OUT_HZ)]
                    if not near:
                        break
                    divs.append(min(near, key=lambda d: abs(vco / d - f)))
                else:
                    # |VCO / d - f| / f in integers (VCO = num / clki_div): 0 only if exact
                    num = clkin_hz * clkfb_div * op_div
                    errors = [abs(num - f * clki_div * d) / (f * clki_div * d)
                              for d, f in zip(divs, wanted)]
                    key = (max(errors), sum(errors), -pfd, abs(vco - 600_000_000))
                    if best_key is None or key < best_key:
                        best_key = key
                        best = PLLSettings(clkin_hz, clki_div, clkfb_div, tuple(divs), wanted)
    if best is None:
        raise ValueError(f"no EHXPLLL setting makes {[f / 1e6 for f in wanted]} MHz from "
                         f"{clkin_hz / 1e6:g} MHz")
    return best


class ECP5PLL(wiring.Component):
    """The EHXPLLL of ``settings`` (a `PLLSettings`). ``clkin`` In (the oscillator, through its
    input buffer); ``clk`` Out, one bit per output (CLKOP, CLKOS, ...), to drive clock domains;
    ``locked`` Out (LOCK: high once the loop has locked; low again if it loses lock)."""

    def __init__(self, settings):
        self.settings = settings
        super().__init__({"clkin": In(1), "clk": Out(len(settings.out_divs)), "locked": Out(1)})

    def elaborate(self, platform):
        m = Module()
        s = self.settings
        params = {}
        for n, (pin, div) in enumerate(zip(OUTPUTS, s.out_divs)):
            params[f"p_{pin}_ENABLE"] = "ENABLED"
            params[f"p_{pin}_DIV"] = div
            # CPHASE = DIV - 1 is 0 degrees (as Lattice's tools and LiteX set it); the phase
            # between the outputs does not matter here, every crossing is asynchronous.
            params[f"p_{pin}_CPHASE"] = div - 1
            params[f"p_{pin}_FPHASE"] = 0
            params[f"o_{pin}"] = self.clk[n]
            params[f"a_FREQUENCY_PIN_{pin}"] = f"{float(s.out_hz[n]) / 1e6:.6f}"
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{s.clkin_hz / 1e6:.6f}",
            # Loop-filter settings ecppll and LiteX use for every divider choice.
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=s.clki_div, p_CLKFB_DIV=s.clkfb_div, p_FEEDBK_PATH="CLKOP",
            i_CLKI=self.clkin, i_CLKFB=self.clk[0], i_RST=0, i_STDBY=0,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_LOCK=self.locked, **params)
        return m
