"""``bench_model``: convert a model for each backend of a profile (cached), then measure them all beside the ONNX
Runtime FP32 reference with :func:`edgeopt.bench.api.bench_artifacts`. Apart from the measuring so that measuring
(convert's own check of its speed claim included) never imports ``convert``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from edgeopt.bench.api import BenchOptions, bench_artifacts, cache_dir, reference_artifact
from edgeopt.errors import EdgeoptError


def _convert_cached(model: Path, model_sha: str, profile, backend: str, *, calib, eval_data, input_shapes,
                    precision=None, metric=None) -> Path:
    from edgeopt.cache_key import artifact_key
    from edgeopt.options import ConvertOptions, from_keywords
    from edgeopt.plan import make_plan

    options = from_keywords(ConvertOptions, dict(backend=backend, precision=precision, metric=metric, calib=calib,
                                                 eval=eval_data, input_shapes=input_shapes, force=True), where="bench")
    plan = make_plan(profile, options.chain_request(), input_shapes=options.input_shapes)
    out = cache_dir() / f"{backend}-{artifact_key(plan.hash, model_sha, calib=calib, eval=eval_data)[:32]}"
    if (out / "manifest.json").is_file():
        return out
    from edgeopt.convert import convert

    res = convert(str(model), profile, str(out), options, plan=plan)
    return Path(res.artifact_dir or out)


def bench_model(model: str | os.PathLike, profile: str, *, backends: str = "all", calib: str | None = None,
                eval_data: str | None = None, input_shapes: dict | None = None, precision: str | None = None,
                options: BenchOptions | None = None, progress: Callable[[float], None] | None = None,
                on_event: Callable[[str], None] | None = None, metric=None) -> dict:
    """Convert ``model`` for each backend of ``profile`` (cached), then measure them all with the
    ONNX Runtime FP32 reference. A backend that fails to convert is a row with its error. ``metric``: the
    task metric judging accuracy (an :class:`edgeopt.metrics.MetricSpec`; None: chosen from the output)."""
    from edgeopt.files import file_sha256
    from edgeopt.model import load_onnx
    from edgeopt.profiles import load_profile

    path = Path(model)
    load_onnx(path)  # one-line error for a bad model
    prof = load_profile(profile)
    listed = [b.name.value for b in prof.backends]
    wanted = listed if backends in ("all", "", None) else [b.strip() for b in backends.split(",") if b.strip()]
    for b in wanted:
        if b not in listed:
            from edgeopt.errors import UsageError, did_you_mean

            raise UsageError(f"backend '{b}' is not listed by profile '{prof.name}'",
                             did_you_mean(b, listed) or f"it lists: {', '.join(listed)}")
    sha = file_sha256(path)
    arts: dict[str, str] = {}
    failed = []
    ref = reference_artifact(path, sha)
    arts[str(ref)] = "reference onnxruntime fp32"
    for b in wanted:
        if on_event:
            on_event(f"converting for {b}")
        try:
            out = _convert_cached(path, sha, prof, b, calib=calib, eval_data=eval_data, input_shapes=input_shapes,
                                  precision=precision, metric=metric)
            arts[str(out)] = b
        except Exception as err:  # noqa: BLE001 - one backend failing does not stop the others
            msg = err.one_line() if isinstance(err, EdgeoptError) else f"{type(err).__name__}: {err}"
            failed.append({"name": b, "backend": b, "status": "failed", "error": msg.splitlines()[0][:300]})
    o = (options or BenchOptions()).model_copy(update={"profile": prof.name})
    validations = {}
    for art in list(arts)[1:]:  # the reference's accuracy, as the converter validated it on the same data
        from edgeopt.artifact import load_artifact

        try:
            val = load_artifact(art, verify=False).validation
        except EdgeoptError:  # an artifact its runner reads but this edgeopt's Manifest does not: no figure from it
            continue
        if val is not None and val.accuracy_reference is not None:
            validations[str(ref)] = {"accuracy": val.accuracy_reference, "metric": val.metric,
                                     "note": "the task metric of the FP32 reference in ONNX Runtime, from "
                                     "the converter's validation of the other artifacts"}
            break
    result = bench_artifacts(list(arts), o, progress=progress, names=arts, validations=validations, keep_going=True)
    result["rows"].extend(failed)
    result["model"] = str(path)
    result["profile"] = prof.name
    return result
