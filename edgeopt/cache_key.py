"""The one key of a cached conversion, used by ``bench MODEL`` (``bench/api.py``) and ``pipeline run``
(``pipeline/cache.py``) alike.

A converted artifact is decided by its plan (every profile-dependent choice is settled in it: see
``edgeopt.plan``), the source model's bytes, the data it was calibrated and validated on, the preprocessing,
``$SOURCE_DATE_EPOCH`` (the manifest's ``created``), the versions of the tools that make it and edgeopt's
own conversion source. :func:`artifact_key` hashes exactly these: a profile edit that changes the artifact
changes the plan's hash and so the key; so does a new TVM tuning database (its content hash is in the TVM
stage's config, settled by the planner); two identical plans share it. Nothing reads the profile here.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

# Source that decides an artifact's bytes: the chain, the plan, the manifest writer, the runners.
_CODE_GLOBS = (("converters", "**/*.py"), ("edgeopt", "convert.py"), ("edgeopt", "convert_build.py"),
               ("edgeopt", "chain.py"), ("edgeopt", "plan.py"), ("edgeopt", "option_resolution.py"),
               ("edgeopt", "backend_choice.py"), ("edgeopt", "config_errors.py"),
               ("edgeopt", "metrics/**/*.py"), ("edgeopt", "options.py"),
               ("edgeopt", "artifact.py"), ("edgeopt", "validate.py"), ("edgeopt", "data.py"),
               ("edgeopt", "model.py"), ("edgeopt", "runtime/**/*.py"))


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, str | None]:
    """edgeopt's version and each backend library's (from the registry), and torch's (--from-torch exports)."""
    from edgeopt import __version__
    from edgeopt.converters.registry import libraries
    from edgeopt.deps import version_of

    dists = [d for _, d, _ in libraries()] + ["torch"]
    return {"edgeopt": __version__, **{d: version_of(d) for d in dists}}


def code_files() -> list[tuple[str, Path]]:
    """edgeopt's conversion source files, in hashing order: (name relative to its root, path)."""
    import edgeopt
    import edgeopt.converters

    roots = {"edgeopt": Path(edgeopt.__file__).parent, "converters": Path(edgeopt.converters.__file__).parent}
    out = []
    for root_name, pattern in _CODE_GLOBS:
        root = roots[root_name]
        for p in sorted(root.glob(pattern)):
            if p.is_file() and "__pycache__" not in p.parts:
                out.append((f"{root_name}/{p.relative_to(root).as_posix()}", p))
    return out


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over edgeopt's conversion source files (a code change is a cache miss)."""
    h = hashlib.sha256()
    for name, p in code_files():
        h.update(f"{name}\0".encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def path_sha256(p: str | os.PathLike | None) -> str | None:
    """sha256 of a file, or of a folder's files (relative names and bytes, sorted); None for None or nothing."""
    from edgeopt.files import file_sha256

    if p is None:
        return None
    path = Path(p)
    if path.is_file():
        return file_sha256(path)
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(x for x in path.rglob("*") if x.is_file()):
            h.update(f"{f.relative_to(path).as_posix()}\0{file_sha256(f)}\n".encode())
        return h.hexdigest()
    return None


def artifact_key(plan_hash: str, model_sha: str, *, calib: str | os.PathLike | None = None,
                 eval: str | os.PathLike | None = None, preprocess: Any = None, from_torch: str | None = None) -> str:
    """The sha256 (hex) naming the artifact that ``plan_hash`` makes of the model whose bytes hash to
    ``model_sha``, with the calibration/evaluation data at ``calib``/``eval`` (files or folders)."""
    body = {"plan": plan_hash, "model": model_sha, "calib": path_sha256(calib), "eval": path_sha256(eval),
            "preprocess": preprocess, "from_torch": from_torch, "tools": tool_versions(), "code": code_fingerprint(),
            "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH") or None}  # the manifest's created
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
