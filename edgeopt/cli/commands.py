"""Imports every ``edgeopt/cli/*_cmd.py`` module so that each registers its verb on the app."""

import importlib
import pkgutil

import edgeopt.cli as _cli

for _mod in sorted(m.name for m in pkgutil.iter_modules(_cli.__path__) if m.name.endswith("_cmd")):
    importlib.import_module(f"edgeopt.cli.{_mod}")
