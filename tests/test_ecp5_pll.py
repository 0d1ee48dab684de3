"""ecp5_pll against Project Trellis' ecppll (the venv's yowasp-ecppll, an independent
implementation of the EHXPLLL's divider model), against the datasheet ranges, and the boards'
PLL settings; the EHXPLLL Instance's parameters as the netlist carries them."""
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from amaranth.back import rtlil

from hotline.fpga.boards import BOARDS
from hotline.host.serial_device import SerialDevice
from hotline.fpga.ecp5_pll import DIVS, ECP5PLL, OUT_HZ, PFD_HZ, VCO_HZ, ecp5_pll


def ecppll(clkin_mhz, out_mhz, tmp_path):
    """ecppll's choice for one output: (CLKI_DIV, CLKFB_DIV, CLKOP_DIV, VCO MHz, out MHz)."""
    exe = Path(sys.executable).with_name("yowasp-ecppll")
    if not exe.exists():
        pytest.skip("no yowasp-ecppll in the venv")
    r = subprocess.run([exe, "-i", str(clkin_mhz), "-o", str(out_mhz), "-f", "pll.v"],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
    field = {k.strip(): v.strip() for k, v in re.findall(r"^([\w ]+): (\S+)", r.stdout, re.M)}
    return (int(field["Refclk divisor"]), int(field["Feedback divisor"]),
            int(field["clkout0 divisor"]), float(field["VCO frequency"]),
            float(field["clkout0 frequency"]))


def check_ranges(s):
    assert s.clki_div in DIVS and s.clkfb_div in DIVS and all(d in DIVS for d in s.out_divs)
    assert PFD_HZ[0] <= s.pfd_hz <= PFD_HZ[1]
    assert VCO_HZ[0] <= s.vco_hz <= VCO_HZ[1]
    assert all(OUT_HZ[0] <= f <= OUT_HZ[1] for f in s.out_hz)
    # the feedback loop: CLKOP / CLKFB_DIV equals the PFD (feedback from CLKOP)
    assert s.out_hz[0] / s.clkfb_div == Fraction(s.clkin_hz, s.clki_div)


CASES = [(25, 50), (25, 60), (25, 57.2), (25, 33.3), (48, 60), (48, 64), (48, 75), (12, 48),
         (25, 125), (100, 37), (48, 13.7)]


@pytest.mark.rtl
@pytest.mark.parametrize("clkin, out", CASES)
def test_one_output_as_near_as_ecppll(clkin, out, tmp_path):
    s = ecp5_pll(round(clkin * 1e6), [round(out * 1e6)])
    check_ranges(s)
    ki, fb, od, vco, got = ecppll(clkin, out, tmp_path)
    # Our model of ecppll's dividers gives ecppll's own VCO and output (its 6 digits).
    assert float(Fraction(round(clkin * 1e6), ki) * fb * od) / 1e6 == pytest.approx(vco, rel=1e-5)
    assert float(Fraction(round(clkin * 1e6), ki) * fb) / 1e6 == pytest.approx(got, rel=1e-5)
    # ... and ours is at least as near the wanted frequency as ecppll's.
    want = Fraction(round(out * 1e6))
    assert abs(s.out_hz[0] - want) <= abs(Fraction(round(clkin * 1e6), ki) * fb - want)
    report = s.report()["outputs"][0]
    assert report["pin"] == "CLKOP" and report["hz"] == float(s.out_hz[0])


def test_two_outputs_exact_when_possible():
    # 50 MHz and 60 MHz share a 600 MHz VCO; 50 and 48 MHz from 25 MHz share none that the
    # feedback loop can reach (48 MHz needs CLKI_DIV 25, a 1 MHz PFD), so the nearest is given.
    s = ecp5_pll(25_000_000, [50_000_000, 60_000_000])
    check_ranges(s)
    assert s.exact and s.out_hz == (50_000_000, 60_000_000)
    s = ecp5_pll(25_000_000, [50_000_000, 48_000_000])
    check_ranges(s)
    assert not s.exact and s.out_hz[0] == 50_000_000
    # no integer divider of any reachable VCO is nearer 48 MHz
    best = min(abs(Fraction(50_000_000 * od, d) - 48_000_000) for od in DIVS for d in DIVS
               if VCO_HZ[0] <= 50_000_000 * od <= VCO_HZ[1])
    assert abs(s.out_hz[1] - 48_000_000) == best
    assert s.report()["outputs"][1]["ppm"] < 0


def test_four_outputs_and_refusals():
    s = ecp5_pll(48_000_000, [96_000_000, 48_000_000, 24_000_000, 12_000_000])
    check_ranges(s)
    assert s.exact
    with pytest.raises(ValueError, match="1 to 4 outputs"):
        ecp5_pll(25_000_000, [1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="8..400 MHz"):
        ecp5_pll(5_000_000, [50_000_000])
    # beyond the outputs' range: the nearest, reported as not exact
    s = ecp5_pll(25_000_000, [500_000_000])
    assert not s.exact and s.out_hz == (400_000_000,)


@pytest.mark.parametrize("name", [n for n, b in BOARDS.items() if b.pll])
def test_board_clocks_are_exact(name):
    b = BOARDS[name]
    s = b.pll_settings
    check_ranges(s)
    assert s.out_hz == (b.core_hz, b.uart_hz) and s.clkin_hz == b.osc_hz
    assert b.uart_hz == b.divisor * b.baud and b.divisor >= 8
    assert b.baud == 3_000_000 == SerialDevice.__init__.__defaults__[2] and b.clock_hz == b.core_hz


def test_instance_parameters():
    s = ecp5_pll(25_000_000, [50_000_000, 60_000_000])
    text = rtlil.convert(ECP5PLL(s))
    cell = text[text.index("cell \\EHXPLLL"):]
    cell = cell[:cell.index("\n  end")]
    params = dict(re.findall(r"parameter \\(\w+) (\S+)", cell))
    assert params["CLKI_DIV"] == str(s.clki_div) and params["CLKFB_DIV"] == str(s.clkfb_div)
    assert params["CLKOP_DIV"] == str(s.out_divs[0]) and params["CLKOS_DIV"] == str(s.out_divs[1])
    assert params["FEEDBK_PATH"] == '"CLKOP"' and params["CLKOS_ENABLE"] == '"ENABLED"'
    # CLKFB is fed from CLKOP's net
    clkop = re.search(r"connect \\CLKOP (\S+)", cell).group(1)
    assert re.search(r"connect \\CLKFB (\S+)", cell).group(1) == clkop
    assert 'FREQUENCY_PIN_CLKI "25.000000"' in text
