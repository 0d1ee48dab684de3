"""No function or method under hw/, sim/ or sw/ is longer than `MAX_LINES` (its ``def`` line
to its last line, decorators not counted): a longer ``elaborate`` is split into
``wiring.Component`` stages, or into helper methods (docs/hardware.md); a longer testbench loop
or parser builder into its phases or parts. Checked with `ast`, nested functions included."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 200


def long_functions(path: Path, text: str, limit: int = MAX_LINES) -> dict[str, int]:
    """{``file:Class.function``: lines} of the functions of ``text`` (the file ``path``) longer
    than ``limit`` lines."""
    rel = path.relative_to(ROOT)
    found = {}

    def walk(node, scope):
        for child in ast.iter_child_nodes(node):
            name = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found[f"{rel}:{name}"] = lines
            walk(child, name)
    walk(ast.parse(text), "")
    return found


def long_functions_under(folder: str) -> dict[str, int]:
    """`long_functions` of every ``.py`` file under ``ROOT / folder``."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        found.update(long_functions(path, path.read_text()))
    return found


def test_no_hw_function_over_the_limit():
    found = long_functions_under("hw")
    assert not found, (f"functions under hw/ longer than {MAX_LINES} lines (split them into "
                       f"stage components or helpers): {found}")


def test_no_sim_or_sw_function_over_the_limit():
    found = {**long_functions_under("sim"), **long_functions_under("sw")}
    assert not found, (f"functions under sim/ or sw/ longer than {MAX_LINES} lines (split them "
                       f"into their phases or parts): {found}")


def test_the_check_counts_methods_and_nested_functions():
    body = "".join(f"    x{i} = {i}\n" for i in range(8))
    text = ("class A:\n    def short(self):\n        pass\n\n    def long(self):\n"
            + body.replace("    ", "        ") + "\ndef outer():\n    def inner():\n"
            + body.replace("    ", "        ") + "    return inner\n")
    assert long_functions(ROOT / "hw" / "x.py", text, limit=8) == {
        "hw/x.py:A.long": 9, "hw/x.py:outer": 11, "hw/x.py:outer.inner": 9}
