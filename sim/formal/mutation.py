"""Mutants for mutation-checking a proof: a block's module re-executed with one source edit.

`mutant(module, old, new)` returns a fresh copy of ``module`` (e.g. ``hotline.hw.csr``) whose
source has the one occurrence of ``old`` replaced by ``new``; the module on disk and the
imported one stay as they are. A proof that still holds on a mutant cannot see that defect.
"""
import inspect
import types

__all__ = ["mutant"]


def mutant(module, old, new):
    """``module`` with its single occurrence of ``old`` replaced by ``new`` (ValueError if
    ``old`` is absent or not unique: the mutation no longer matches the design)."""
    source = inspect.getsource(module)
    count = source.count(old)
    if count != 1:
        raise ValueError(f"mutation {old!r} occurs {count} times in {module.__name__} "
                         f"(needs exactly once)")
    copy = types.ModuleType(f"{module.__name__}__mutant")
    copy.__package__ = module.__package__
    copy.__file__ = module.__file__
    exec(compile(source.replace(old, new), module.__file__, "exec"), copy.__dict__)
    return copy
