"""The documentation: generated benchmark tables equal their JSON, every relative link resolves, every flag a
docs command names exists, and the mkdocs site builds in strict mode."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _docs_tables():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import docs_tables
    finally:
        sys.path.remove(str(REPO / "bench"))
    return docs_tables


def test_generated_tables_equal_their_json():
    assert _docs_tables().stale(REPO) == [], "run: .venv/bin/python bench/docs_tables.py"


def test_every_generated_table_has_its_markers_and_sources():
    dt = _docs_tables()
    for table in dt.TABLES:
        text = (REPO / table.page).read_text()
        assert text.count(dt.BEGIN.format(name=table.name)) == 1, table.name
        for src in table.sources:
            assert (REPO / src).is_file(), src


def test_check_fails_on_a_hand_edited_table(tmp_path):
    import shutil

    dt = _docs_tables()
    table = dt.TABLES[0]
    for rel in {table.page, *table.sources}:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    page = tmp_path / table.page
    page.write_text(page.read_text().replace("| pi5 |", "| pi5 (edited) |", 1))
    tables = dt.TABLES
    try:
        dt.TABLES = (table,)
        assert dt.stale(tmp_path) == [table.page]
    finally:
        dt.TABLES = tables


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def _docs_commands() -> list[list[str]]:
    cmds = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh|shell|text)\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                for part in re.split(r"\s*(?:&&|;)\s*", line):
                    if part.startswith("edgeopt "):
                        cmds.append(shlex.split(part))
    return cmds


def _options(argv: list[str]) -> tuple[str, set[str]]:
    """The command an ``edgeopt`` argv runs (through its groups) and every option name it takes."""
    import typer

    from edgeopt.cli import _register, app

    _register()  # the CLI adds its verbs when it starts
    cmd, names = typer.main.get_command(app), []
    for word in argv[1:]:
        if word.startswith("-"):
            continue
        sub = cmd.get_command(cmd.context_class(cmd), word) if hasattr(cmd, "list_commands") else None
        if sub is None:
            break
        cmd = sub
        names.append(word)
    opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    return " ".join(names), opts | {"--help"}


def test_every_flag_a_docs_command_names_exists():
    """Each ``--flag`` in an edgeopt command of README.md or docs/ is an option of that command."""
    missing = []
    for argv in _docs_commands():
        name, opts = _options(argv)
        for flag in (w.split("=")[0] for w in argv if w.startswith("--")):
            if flag not in opts:
                missing.append(f"edgeopt {name}: {flag}")
    assert not missing, sorted(set(missing))


def test_docs_site_builds(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                       cwd=REPO, capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "device-matrix" / "index.html").is_file()


def _env() -> dict:
    import os

    return {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
