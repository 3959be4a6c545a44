"""Lazy imports of heavy or optional libraries, with the extra that provides them."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import sys
from types import ModuleType

from edgeopt.errors import MissingDependencyError

# import name -> (distribution name, edgeopt extra); a backend's libraries come from its class (the registry)
OPTIONAL = {
    "paramiko": ("paramiko", "remote"),
    "labgrid": ("labgrid", "labgrid"),
    "torch": ("torch", None),
    "onnxslim": ("onnxslim", None),
    "matplotlib": ("matplotlib", None),
}


def _dist_and_extra(module: str) -> tuple[str, str | None]:
    if module in OPTIONAL:
        return OPTIONAL[module]
    from edgeopt.converters.registry import libraries

    return next(((d, e) for i, d, e in libraries() if i == module), (module, None))


def install_hint(module: str) -> str:
    dist, extra = _dist_and_extra(module)
    if extra:
        return f"install it with: pip install 'edgeopt[{extra}]'"
    if module == "torch":
        return "install it with: pip install torch==2.14.1"
    return f"install it with: pip install {dist}"


def require(module: str, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        root = module.split(".")[0]
        what = f" (needed for {purpose})" if purpose else ""
        raise MissingDependencyError(
            f"{_dist_and_extra(root)[0]} is not installed{what}", install_hint(root)
        ) from err


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


_QUIET = [False]  # set by the CLI unless --verbose/--debug (edgeopt.cli.quiet_libraries)


def quiet_library_output(quiet: bool = True) -> None:
    _QUIET[0] = quiet


@contextlib.contextmanager
def library_prints():
    """Where a library's own ``print()`` goes while it runs (ONNX Runtime's calibrators, NNCF): never stdout,
    which belongs to the CLI's output; stderr with ``--verbose``, else nowhere."""
    if not _QUIET[0]:
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield
