"""No function in the package (``edgeopt``, ``converters``, ``remote``) is longer than about 80 lines: a long one is
split into named steps. ``python tests/project/test_function_size.py`` lists the ones over the limit (the count before/after
a refactor)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("edgeopt", "converters", "remote")
MAX_LINES = 80

# function -> why it is still longer; nothing else may be
ALLOWED: dict[str, str] = {}


def long_functions(limit: int = MAX_LINES) -> dict[str, int]:
    """``path:name`` -> lines (the ``def`` line to the last, decorators not counted) of every function over ``limit``."""
    out = {}
    for d in PACKAGE_DIRS:
        for path in sorted((REPO / d).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        out[f"{path.relative_to(REPO).as_posix()}:{node.name}"] = lines
    return out


def test_no_function_over_80_lines_but_the_named_ones():
    over = {name: n for name, n in long_functions().items() if name not in ALLOWED}
    assert not over, f"split these into named steps: {over}"


def test_the_allowed_ones_are_still_long():
    # an entry left here after its function was split (or renamed) would allow the next long one unseen
    assert set(ALLOWED) <= set(long_functions()), set(ALLOWED) - set(long_functions())


if __name__ == "__main__":
    found = long_functions()
    for name, n in sorted(found.items(), key=lambda t: -t[1]):
        print(n, name)
    print(len(found), f"functions over {MAX_LINES} lines")
