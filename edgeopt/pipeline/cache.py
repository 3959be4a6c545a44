"""A content-addressed cache of converted artifacts (the whole chain of one target).

The key is the sha256 of: the model's bytes (or the torch factory and weights), the plan hash
(every stage's config, backend settings, input shapes), the profile's content, the calibration
and evaluation data's bytes, the preprocessing, ``$SOURCE_DATE_EPOCH`` (the manifest's
``created``), the versions of the tools that make the artifact, and a fingerprint of edgeopt's own conversion source code. Nothing else changes an
artifact, so a hit is reused as-is (its manifest included: same bytes as the first build).

Cache directory: ``$EDGEOPT_CACHE_DIR/pipeline`` or ``~/.cache/edgeopt/pipeline``. Entries are
written atomically by ``convert`` (temporary sibling, then rename); deleting the directory is safe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from edgeopt.options import ConvertOptions
from edgeopt.paths import CacheArea, cache_subdir

# Source that decides an artifact's bytes: the chain, the plan, the manifest writer, the runners.
_CODE_GLOBS = (("converters", "**/*.py"), ("edgeopt", "convert.py"), ("edgeopt", "chain.py"), ("edgeopt", "plan.py"),
               ("edgeopt", "metrics/**/*.py"), ("edgeopt", "options.py"),
               ("edgeopt", "artifact.py"), ("edgeopt", "validate.py"), ("edgeopt", "data.py"),
               ("edgeopt", "model.py"), ("edgeopt", "runtime/**/*.py"))


def cache_root() -> Path:
    return cache_subdir(CacheArea.PIPELINE)


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, str | None]:
    from edgeopt import __version__
    from edgeopt.converters.registry import libraries
    from edgeopt.deps import version_of

    dists = [d for _, d, _ in libraries()] + ["torch"]  # torch: --from-torch exports
    return {"edgeopt": __version__, **{d: version_of(d) for d in dists}}


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over edgeopt's conversion source files (a code change is a cache miss)."""
    import edgeopt
    import edgeopt.converters

    roots = {"edgeopt": Path(edgeopt.__file__).parent, "converters": Path(edgeopt.converters.__file__).parent}
    h = hashlib.sha256()
    for root_name, pattern in _CODE_GLOBS:
        root = roots[root_name]
        for p in sorted(root.glob(pattern)):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(f"{root_name}/{p.relative_to(root).as_posix()}\0".encode())
                h.update(p.read_bytes())
    return h.hexdigest()


def path_sha256(p: str | os.PathLike | None) -> str | None:
    """sha256 of a file, or of a folder's files (relative names and bytes, sorted)."""
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


def profile_facts(profile) -> dict:
    """What of a profile can change an artifact: backends, chain defaults, ISA (not measured speeds:
    the detected ``host`` profile measures its memory bandwidth afresh each time)."""
    from edgeopt.profiles import profile_to_dict

    d = profile_to_dict(profile)
    units = [{k: u.get(k) for k in ("kind", "name", "cores", "isa")} for u in d.get("compute_units") or []]
    return {"name": d.get("name"), "arch": d.get("arch"), "backends": d.get("backends"), "units": units,
            "default_chain": d.get("default_chain"), "requires_static_shapes": d.get("requires_static_shapes")}


def build_key(*, model_sha: str, plan_hash: str, profile: dict, calib_sha: str | None, eval_sha: str | None,
              preprocess: Any = None, extra: dict | None = None) -> str:
    body = {"model": model_sha, "plan": plan_hash, "profile": profile, "calib": calib_sha, "eval": eval_sha,
            "preprocess": preprocess, "tools": tool_versions(), "code": code_fingerprint(), **(extra or {})}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class CachedBuild(BaseModel):
    """What :func:`cached_convert` hands back: the artifact (in the cache), whether it was a hit, the cache key."""

    model_config = ConfigDict(frozen=True)

    artifact: Path
    cached: bool
    key: str
    plan_hash: str


def cached_convert(model: str | os.PathLike | None, profile, options: ConvertOptions | None = None, *,
                   model_sha: str | None = None, on_warning=None, progress=None, **keywords) -> CachedBuild:
    """Convert through the cache. ``options``: a :class:`edgeopt.options.ConvertOptions` (its ``recipe`` an
    :class:`edgeopt.plan.Recipe`: backend, precision, prune, stage overrides...; its data, shapes,
    preprocessing, torch source), or the same as keywords. Errors are those of
    :func:`edgeopt.convert.convert` (a missed gate: ``GateFailedError``).
    """
    from edgeopt.convert import convert
    from edgeopt.options import from_keywords
    from edgeopt.plan import make_plan

    if options is not None and keywords:
        from edgeopt.errors import UsageError

        raise UsageError(f"cached_convert: give ConvertOptions or keywords, not both ({', '.join(keywords)})")
    o = options if options is not None else from_keywords(ConvertOptions, keywords, where="cached_convert")
    recipe, input_shapes, calib, eval, preprocess = o.recipe, o.input_shapes, o.calib, o.eval, o.preprocess
    from_torch, weights = o.from_torch, o.weights
    plan = make_plan(profile, o.chain_request(), recipe=recipe, input_shapes=input_shapes)
    if model_sha is None:
        model_sha = path_sha256(model) if model is not None else hashlib.sha256(
            f"{from_torch}\0{path_sha256(weights)}".encode()).hexdigest()
    key = build_key(model_sha=model_sha, plan_hash=plan.hash, profile=profile_facts(profile),
                    calib_sha=path_sha256(calib), eval_sha=path_sha256(eval),
                    preprocess=preprocess, extra={"from_torch": from_torch,  # created: $SOURCE_DATE_EPOCH
                                                  "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH") or None})
    out = cache_root() / f"{plan.backend.value}-{key[:32]}"
    if (out / "manifest.json").is_file():
        from edgeopt.artifact import load_artifact
        from edgeopt.errors import BadInputError

        try:
            load_artifact(out)  # every file still has its sha256
            return CachedBuild(artifact=out, cached=True, key=key, plan_hash=plan.hash)
        except BadInputError:  # a damaged entry of edgeopt's own cache: rebuild it from scratch
            import shutil

            shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    convert(str(model) if model is not None else None, profile, str(out), o.model_copy(update={"force": True}),
            on_warning=on_warning, progress=progress, plan=plan)
    return CachedBuild(artifact=out, cached=False, key=key, plan_hash=plan.hash)
