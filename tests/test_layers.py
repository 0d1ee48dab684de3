"""One import direction (docs/design.md, "Layers"), checked on every import of the package.

    contract  <-  (hw, model, data)  <-  host  <-  (sim, fpga, nn)  <-  (train, cli, bench)

Every ``.py`` under sw/, hw/, sim/ and fpga/ is parsed with `ast`; every import statement in
it, function-level and relative ones included, is mapped to the layer of the module it
imports, and an import that its file's layer may not make fails the test with
``file:line`` and the rule. Besides: a function-level import must not stand where a
module-level one would do, so every function-level import carries a ``# lazy:``
comment (on its line or the line above) that says why: a heavy or optional dependency (torch,
matplotlib, cocotb, Amaranth elaboration) kept out of a path that does not need it.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"sw": "hotline", "hw": "hotline.hw", "sim": "hotline.sim", "fpga": "hotline.fpga"}

# Which layers each layer may import (its own included).
BELOW_HOST = {"contract", "hw", "model", "data"}
ALLOWED = {
    "contract": {"contract"},
    "hw": {"contract", "hw"},
    "model": {"contract", "model"},
    "data": {"contract", "data"},
    "host": {"contract", "model", "data", "host"},
    "sim": BELOW_HOST | {"host", "sim", "fpga"},
    "fpga": BELOW_HOST | {"host", "fpga"},
    "nn": BELOW_HOST - {"hw"} | {"host", "nn"},
    "train": BELOW_HOST | {"host", "sim", "fpga", "nn", "train"},
    "cli": BELOW_HOST | {"host", "sim", "fpga", "nn", "train", "cli"},
    "bench": BELOW_HOST | {"host", "sim", "fpga", "nn", "train", "cli", "bench"},
}
RULES = {
    "contract": "the contract imports nothing else from the project",
    "hw": "gateware imports only the contract and other gateware",
    "model": "models import only the contract (and other models)",
    "data": "data imports only the contract (and other data modules)",
    "host": "the host runtime never imports hw, sim, fpga, train, cli or bench",
    "sim": "co-simulation imports the layers below it and fpga, never train, cli or bench",
    "fpga": "fpga imports the layers below it, never sim, train, cli or bench",
    "nn": "the embedding module imports contract, model, data and host, never hw, sim, fpga, train, cli or bench",
    "train": "train imports the layers below it, never cli or bench",
    "cli": "cli imports anything but bench",
    "bench": "bench imports anything",
}
# ``hotline`` itself is the Device API's entry point (``hotline.open``): the host layer.
SUBPACKAGES = ("contract", "model", "data", "host", "nn", "train", "cli", "bench")


def module_of(path: Path) -> str:
    """The dotted module name of a file of the package."""
    rel = path.relative_to(ROOT)
    parts = [FOLDERS[rel.parts[0]]] + list(rel.parts[1:])
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """The layer of a module of the package; None for anything outside it."""
    parts = module.split(".")
    if parts[0] != "hotline":
        return None
    if len(parts) == 1:
        return "host"
    if parts[1] == "__main__":   # ``python -m hotline`` (torchrun -m hotline): the command line
        return "cli"
    if parts[1] in ("hw", "sim", "fpga") or parts[1] in SUBPACKAGES:
        return parts[1]
    return f"<unplaced hotline.{parts[1]}>"


def module_of_path(module: str) -> Path | None:
    """The file of a module of the package, or None."""
    parts = module.split(".")
    for folder, package in sorted(FOLDERS.items(), key=lambda kv: -len(kv[1])):
        pkg = package.split(".")
        if parts[:len(pkg)] == pkg:
            base = ROOT / folder / Path(*parts[len(pkg):]) if parts[len(pkg):] else ROOT / folder
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.exists():
                    return candidate
            return None
    return None


def imported_modules(tree: ast.AST, module: str, is_package: bool):
    """(node, imported module, function-level) for every import in ``tree``; ``from M import
    n`` yields M and, when ``M.n`` is a module of the package, ``M.n`` too."""
    package = module if is_package else module.rpartition(".")[0]
    nested = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested.update(id(n) for n in ast.walk(fn) if n is not fn)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, id(node) in nested
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            yield node, target, id(node) in nested
            for alias in node.names:
                if module_of_path(f"{target}.{alias.name}") is not None:
                    yield node, f"{target}.{alias.name}", id(node) in nested


def _explained(lines, node) -> bool:
    """A ``# lazy:`` comment on the import, or on the comment and import lines just above it
    (a group of lazy imports shares one comment)."""
    if any("# lazy:" in line for line in lines[node.lineno - 1:node.end_lineno]):
        return True
    i = node.lineno - 2
    while i >= 0 and lines[i].strip().startswith(("#", "from ", "import ")):
        if "# lazy:" in lines[i]:
            return True
        i -= 1
    return False


def check_source(path: Path, text: str) -> list[str]:
    """The layer violations and unexplained function-level imports of one file."""
    module = module_of(path)
    layer = layer_of(module)
    lines = text.splitlines()
    problems = []
    tree = ast.parse(text, str(path))
    for node, target, nested in imported_modules(tree, module, path.name == "__init__.py"):
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        to = layer_of(target)
        if to is not None and to not in ALLOWED.get(layer, ()):
            problems.append(f"{where}: {module} ({layer}) imports {target} ({to}): {RULES[layer]}")
        if nested and not _explained(lines, node):
            problems.append(f"{where}: function-level import of {target} without a "
                            f"'# lazy: why' comment (import it at module level)")
    return problems


def python_files():
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_every_module_has_a_layer():
    unplaced = [str(p.relative_to(ROOT)) for p in python_files()
                if layer_of(module_of(p)) not in ALLOWED]
    assert not unplaced, f"modules outside every layer (put them in a subpackage): {unplaced}"


def test_imports_go_one_way():
    problems = [msg for p in python_files() for msg in check_source(p, p.read_text())]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path,text,rule", [
    ("hw/fragmenter.py", "from hotline.host import device\n", "gateware imports only"),
    ("hw/fragmenter.py", "def f():\n    from hotline.sim import runner  # lazy: x\n",
     "gateware imports only"),
    ("sw/host/device.py", "from ..sim_device import x\nfrom hotline.fpga import boards\n",
     "the host runtime never"),
    ("sw/contract/keys.py", "from .. import model\n", "the contract imports nothing"),
    ("fpga/board_top.py", "from hotline.sim.accelerator_run import x\n", "fpga imports"),
    ("sw/train/run.py", "from .. import cli\n", "train imports the layers below"),
    ("sw/nn/collection.py", "from hotline.train.rows import init_table\n", "the embedding module"),
    ("sw/nn/stores.py", "from hotline.sim import runner\n", "the embedding module"),
    ("sw/model/planner.py", "def f():\n    from .device_model import x\n",
     "function-level import of hotline.model.device_model"),
])
def test_the_check_catches(path, text, rule):
    problems = check_source(ROOT / path, text)
    assert any(rule in p for p in problems), problems


def test_the_check_passes_allowed_imports():
    assert check_source(ROOT / "sw/host/device.py",
                        "from hotline.contract.keys import ROW_BITS\n"
                        "from ..model import device_model\n"
                        "def f():\n    import torch  # lazy: seconds to import\n") == []


def test_no_module_cites_the_brief_for_a_contract():
    """Docstrings cite docs/design.md for the contracts, not ``DESIGN.md`` (the product brief
    outside the repository, which docs/design.md supersedes)."""
    cited = [str(p.relative_to(ROOT)) for p in python_files() if "DESIGN.md" in p.read_text()]
    assert not cited, f"cite docs/design.md instead of DESIGN.md in: {cited}"
