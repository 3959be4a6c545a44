"""Every Python package in the tree is named in pyproject's explicit package list, so a wheel carries it
(an editable install finds sub-packages by path and would hide a missing entry)."""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"edgeopt": "edgeopt", "edgeopt.converters": "converters", "edgeopt.remote": "remote",
         "edgeopt.device_profiles": "device_profiles"}


def test_every_package_is_listed_for_the_wheel():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {k: v for k, v in ROOTS.items() if k != "edgeopt"}
    found = set()
    for name, folder in ROOTS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *rel)))
    assert sorted(found - set(config["packages"])) == []
