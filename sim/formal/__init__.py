"""The formal tier (issue 43): properties of the gateware proved with Yosys + yosys-smtbmc +
Yices (all from pip), one module per block (`row_window_check`), a thin runner (`runner`)
and mutants that each proof must catch (`mutation`). ``python -m hotline.sim.formal`` (make
formal) runs every property at its full depth and every mutant; tests/test_formal.py runs the
reduced tier. What each proof covers: docs/verification.md.
"""
