"""Long classes and functions in `webrl/` do not grow: new ones over the limits fail, and so does growth of old ones.

docs/style.md asks for small files with one main class each; a class past ~250 lines or a function
past ~60 is where that erodes first. Violators once listed in `ALLOWED` with their sizes could only
shrink (leaving the list once under their limit), none could grow, and no other may join; none is left.
A size is counted from the `def`/`class` line to the last line of its body, docstring included,
decorators not; nested functions and methods are measured on their own as well.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "webrl"
CLASS_LINES = 250
FUNCTION_LINES = 60

ALLOWED: dict[str, int] = {}
"""Violators allowed while they shrink: `file::qualified name` -> lines. Empty since PhaseLoop was split (#14)."""


def definition_sizes(source: str) -> dict[str, tuple[int, int]]:
    """Qualified name -> (lines, limit) of every class and function in `source`, nested ones included."""
    sizes: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                limit = CLASS_LINES if isinstance(child, ast.ClassDef) else FUNCTION_LINES
                sizes[name] = (child.end_lineno - child.lineno + 1, limit)
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return sizes


def oversized(package: Path = PACKAGE) -> dict[str, int]:
    """`file::name` -> lines of every class and function in `package` over its limit."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent).as_posix()
        for name, (lines, limit) in definition_sizes(path.read_text(encoding="utf-8")).items():
            if lines > limit:
                found[f"{where}::{name}"] = lines
    return found


def test_sizes_are_counted_per_definition_with_nested_ones_apart():
    source = textwrap.dedent(
        """\
        class A:
            x = 1

            def f(self):
                def g():
                    pass
                return g


        async def h():
            pass
        """
    )
    assert definition_sizes(source) == {
        "A": (7, CLASS_LINES),
        "A.f": (4, FUNCTION_LINES),
        "A.f.g": (2, FUNCTION_LINES),
        "h": (2, FUNCTION_LINES),
    }


def test_a_long_function_is_reported(tmp_path):
    package = tmp_path / "webrl"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    (package / "long.py").write_text(f"def long():\n{body}\n\ndef short():\n    pass\n")
    assert oversized(package) == {"webrl/long.py::long": FUNCTION_LINES + 1}


def test_no_class_or_function_grows_past_its_limit():
    found = oversized()
    new = {name: lines for name, lines in found.items() if name not in ALLOWED}
    grown = {name: (ALLOWED[name], lines) for name, lines in found.items() if lines > ALLOWED.get(name, lines)}
    assert not new, f"over {CLASS_LINES} lines (class) or {FUNCTION_LINES} (function); split them: {new}"
    assert not grown, f"allowlisted definitions grew (allowed, now); shrink them instead: {grown}"


def test_the_allowlist_names_only_todays_violators():
    """An entry under its limit (or gone) must leave the list, so it cannot grow back unnoticed."""
    found = oversized()
    stale = [name for name in ALLOWED if name not in found]
    assert not stale, f"within their limits now (or gone): remove them from ALLOWED: {stale}"
