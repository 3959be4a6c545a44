"""No module in the package (``edgeopt``, ``converters``, ``remote``) is longer than 400 lines: a longer one is
split by concern into small modules. ``python tests/project/test_module_size.py`` lists every module by length,
longest first."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("edgeopt", "converters", "remote")
MAX_LINES = 400


def module_lines(root: Path = REPO) -> dict[str, int]:
    """``path`` (relative to ``root``) -> lines, for every ``.py`` file of the package folders."""
    return {path.relative_to(root).as_posix(): len(path.read_text().splitlines())
            for d in PACKAGE_DIRS for path in sorted((root / d).rglob("*.py"))}


def long_modules(root: Path = REPO, limit: int = MAX_LINES) -> dict[str, int]:
    return {name: n for name, n in module_lines(root).items() if n > limit}


def test_no_module_over_400_lines():
    assert long_modules() == {}, "split these by concern into small modules"


def test_the_check_finds_a_long_module_and_reads_every_package_folder(tmp_path):
    for d in PACKAGE_DIRS:
        (tmp_path / d / "sub").mkdir(parents=True)
        (tmp_path / d / "sub" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "remote" / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "long_test.py").write_text("x = 1\n" * (MAX_LINES + 1))  # not the product
    assert len(module_lines(tmp_path)) == 4
    assert long_modules(tmp_path) == {"remote/sub/long.py": MAX_LINES + 1}


if __name__ == "__main__":
    for name, n in sorted(module_lines().items(), key=lambda t: -t[1]):
        print(n, name)
