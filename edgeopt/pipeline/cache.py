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

from edgeopt.cache_key import artifact_key, path_sha256
from edgeopt.paths import CacheArea, cache_subdir


def cache_root() -> Path:
    return cache_subdir(CacheArea.PIPELINE)


def cached_convert(model: str | os.PathLike | None, profile, *, recipe, calib=None, eval=None, input_shapes=None,
                   preprocess=None, from_torch: str | None = None, weights=None, model_sha: str | None = None,
                   on_warning=None, progress=None, metric_search_path=None) -> dict:
    """Convert through the cache: ``{"artifact": Path, "cached": bool, "key": str, "plan_hash": str}``.

    ``recipe`` is an :class:`edgeopt.plan.Recipe` (backend, precision, prune, stage overrides...).
    Errors are those of :func:`edgeopt.convert.convert` (a missed gate: ``GateFailedError``).
    """
    from edgeopt.convert import convert
    from edgeopt.plan import make_plan
    plan = make_plan(profile, recipe=recipe, input_shapes=input_shapes)
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
            return {"artifact": out, "cached": True, "key": key, "plan_hash": plan.hash}
        except BadInputError:  # a damaged entry of edgeopt's own cache: rebuild it from scratch
            import shutil

            shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    convert(str(model) if model is not None else None, profile, str(out), calib=calib, eval=eval,
            input_shapes=input_shapes, preprocess=preprocess, from_torch=from_torch, weights=weights, force=True,
            on_warning=on_warning, progress=progress, metric_search_path=metric_search_path, plan=plan)
    return {"artifact": out, "cached": False, "key": key, "plan_hash": plan.hash}
