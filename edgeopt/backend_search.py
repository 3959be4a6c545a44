"""``convert --backend auto``: each backend the profile lists for this machine builds the model under the same
options, and the fastest artifact that holds the bound is written (where the profile allows more than
one backend on this device, those backends too).

Only for a profile of this machine (``host``): the artifacts are timed here, each runtime in its own block of
calls alternating over rounds (``blocked_latency_ms``: what one runtime leaves spinning falls on its own next
call), against ONNX Runtime FP32 on the same feed. On a board's profile the host's timings would pick the wrong
backend, so it is refused (exit 2) with how to compare there. TVM is not built (untuned it is the slowest; tune it
first). Each backend's build runs its own accuracy-aware search (its INT8 modes) and its own final gate; one
that misses is dropped with its reason. The manifest's ``backend_search`` keeps every backend, its figures and why
it was chosen or dropped.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from edgeopt.enums import BackendName
from edgeopt.errors import DeviceRefusedError, EdgeoptError, UsageError
from edgeopt.runtime.reference import REFERENCE_FP32

AUTO = "auto"  # the --backend value that asks for the search


def searched_backends(prof) -> list[BackendName]:
    """The installed backends ``prof`` lists, once each, in its order, those that pay only tuned (TVM) left out."""
    from edgeopt.backend_fallback import installed_backends
    from edgeopt.converters.registry import get_backend

    return [b for b in installed_backends(prof) if not get_backend(b).pays_only_tuned]


def check_searchable(prof) -> list[BackendName]:
    if not prof.detected:
        raise UsageError(f"--backend auto times each backend's artifact here, so it needs this machine's profile, "
                         f"not {prof.name}'s",
                         "use --profile host, or build each backend (--backend NAME) and compare them on the board "
                         "with edgeopt remote-bench")
    backends = searched_backends(prof)
    if len(backends) < 2:
        raise UsageError(f"--backend auto needs two installed backends of {prof.name}; found "
                         f"{', '.join(b.value for b in backends) or 'none'}",
                         "install another backend's extra (edgeopt doctor lists them), or name one with --backend")
    return backends


def convert_fastest(model, prof, output, o, build, *, on_warning=None):
    """``build(model, output, options)`` with each searched backend into a folder beside ``output``; the fastest
    that holds is published at ``output`` with ``backend_search`` in its manifest. Returns its ConvertResult."""
    from edgeopt.outputs import check_output, publish

    out = check_output(output, force=o.force, inputs=(model, o.calib, o.eval, o.weights))
    out.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{out.name}.backends-"))
    try:
        built, rows, first_err = {}, [], None
        for backend in check_searchable(prof):
            try:
                built[backend] = build(model, root / backend.value, o.model_copy(update={"backend": backend.value}))
                rows.append({"backend": backend.value})
            except EdgeoptError as err:
                if err.exit_code not in (3, 5) and not isinstance(err, DeviceRefusedError):  # usage, a missing
                    raise  # extra, a bug, an unreachable board: not a property of this backend
                first_err = first_err or err
                rows.append({"backend": backend.value, "verdict": "dropped", "exit_code": int(err.exit_code),
                             "why": err.message})
                if on_warning:
                    on_warning(f"convert --backend auto: {backend.value} dropped ({err.message})")
        if not built:
            raise first_err
        chosen = _time_and_choose(model, built, rows, o)
        result = built[chosen]
        manifest = _record(root / chosen.value, result, rows, model, o, on_warning)
        publish(root / chosen.value, out, force=o.force)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    claim_warning = [manifest.speed_claim.warning] if manifest.speed_claim and manifest.speed_claim.warning else []
    return result.model_copy(update={"artifact_dir": str(Path(output)), "manifest": manifest,
                                     "warnings": [*result.warnings, *claim_warning]})


def _time_and_choose(model, built: dict, rows: list[dict], o) -> BackendName:
    """Each built artifact and ONNX Runtime FP32 timed in blocks on one real input; the rows filled in."""
    from edgeopt.runtime.quick_timing import blocked_latency_ms
    from edgeopt.runtime.run_fn import run_fn

    feed = _one_feed(next(iter(built.values())).manifest, o)
    runs = {REFERENCE_FP32: run_fn(model, o.threads, spinning=False)}
    for backend, res in built.items():
        runs[backend.value] = run_fn(res.artifact_dir, o.threads)
    latency = blocked_latency_ms(runs, feed)
    chosen = min(built, key=lambda b: latency[b.value])
    for row in rows:
        if row["backend"] not in latency:
            continue
        manifest = built[BackendName(row["backend"])].manifest
        v = manifest.validation
        row.update(precision=manifest.precision, metric=v.metric if v else None, metric_drop=v.metric_drop if v else None,
                   units=v.units if v else None, latency_ms=latency[row["backend"]],
                   speedup_vs_reference=round(latency[REFERENCE_FP32] / latency[row["backend"]], 3))
        if row["backend"] == chosen.value:
            row.update(verdict="chosen", why="the fastest that holds the bound")
        else:
            row.update(verdict="dropped", why=f"slower: {latency[row['backend']]:.3g} ms vs "
                                              f"{latency[chosen.value]:.3g} ms ({chosen.value})")
    next(r for r in rows if r["backend"] == chosen.value)["timing"] = (
        "p50 ms on this machine, each runtime in its own block of calls, vs ONNX Runtime FP32 "
        f"{latency[REFERENCE_FP32]:.3g} ms: a quick estimate (edgeopt bench measures)")
    return chosen


def _one_feed(manifest, o) -> dict:
    """The first sample of --eval (else --calib) when it is an .npz; synthetic inputs otherwise."""
    from edgeopt.runtime.measure import feeds_from_npz, synthetic_feeds

    inputs = [i.model_dump(mode="json") if hasattr(i, "model_dump") else dict(i) for i in manifest.inputs]
    for data in (o.eval, o.calib):
        if data is not None and str(data).endswith(".npz"):
            return feeds_from_npz(inputs, str(data), 0)
    return synthetic_feeds(inputs)


def _record(artifact: Path, result, rows: list[dict], model, o, on_warning):
    """``backend_search`` in the chosen artifact's manifest, and its speed-up measured on it (``speed_claim``)."""
    from edgeopt.artifact import write_manifest
    from edgeopt.manifest_types import BackendSearchRow
    from edgeopt.speed_claim import check_speed_claim, npz_inputs

    manifest = result.manifest
    manifest.backend_search = [BackendSearchRow.model_validate(r) for r in rows]
    manifest = write_manifest(artifact, manifest)
    manifest.speed_claim = check_speed_claim(artifact, manifest, Path(model), threads=o.threads,
                                             inputs=npz_inputs(o), warn=on_warning)
    if manifest.speed_claim and manifest.speed_claim.warning:
        manifest.warnings = [*manifest.warnings, manifest.speed_claim.warning]
    return write_manifest(artifact, manifest)
