"""A content-addressed cache of converted artifacts (the whole chain of one target).

The key is :func:`edgeopt.cache_key.artifact_key` (the one bench's cache uses too): the plan hash (every
stage's config, the profile's choices settled in it), the model's bytes (or the torch factory and weights),
the calibration and evaluation data, the preprocessing, ``$SOURCE_DATE_EPOCH``, the tools' versions and
edgeopt's conversion source. Nothing else changes an artifact, so a hit is reused as-is (its manifest
included: same bytes as the first build).

Cache directory: ``$EDGEOPT_CACHE_DIR/pipeline`` or ``~/.cache/edgeopt/pipeline``. Entries are
written atomically by ``convert`` (temporary sibling, then rename); deleting the directory is safe.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from edgeopt.cache_key import artifact_key, path_sha256
from edgeopt.options import ConvertOptions
from edgeopt.paths import CacheArea, cache_subdir


def cache_root() -> Path:
    return cache_subdir(CacheArea.PIPELINE)


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
    key = artifact_key(plan.hash, model_sha, calib=calib, eval=eval, preprocess=preprocess, from_torch=from_torch)
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
