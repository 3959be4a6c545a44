"""The speed-up ``convert`` claims, measured on the written artifact with ``edgeopt bench``'s own measuring.

A claim is the INT8 search's speed verdict (the artifact against FP32 in its runtime) or ``--backend auto``'s pick
(the artifact against ONNX Runtime FP32). Both are quick estimates timed before the artifact was written. Once it
is written, and only on this machine's profile (the claim is about this machine), the artifact and its FP32
reference are measured side by side by ``edgeopt bench ARTIFACT REFERENCE`` itself, in its own process with its own
defaults (:func:`run_bench`), so that the printed figure is the one bench gives. The reference is the FP32 the
estimate was timed against: for ``--backend auto``, the source model in ONNX Runtime FP32 (bench's reference row);
for an INT8 verdict, the FP32 model the artifact was judged against (the normalized one, what ``--precision fp32``
writes) in the artifact's runtime at its FP32 settings. Timing the source model instead would credit the
normalization to INT8: the text-line classifier's OpenVINO INT8 read x1.38 against the source model read by
OpenVINO and x1.15 against the FP32 IR convert writes, its search's estimate x1.13. The reference is kept in
edgeopt's cache (``reference_artifact``), so ``edgeopt bench ARTIFACT REFERENCE`` repeats the claim. Some artifacts run at
one of two speeds for a whole process (seen here, its cause not found); when the first bench process does not agree
with the search's estimate, two more are run and the median process is the claim.
The manifest's ``speed_claim`` keeps both figures and, where other processes took a share of the CPUs during the
measurement, bench's line saying so (a small model run on several threads of a shared CPU moves with the load:
its median is only as steady as the machine). convert prints the measured one with the estimate beside it, and
one warning line when they differ by more than ``AGREE``.
"""

from __future__ import annotations

from pathlib import Path

from edgeopt.enums import ClaimSource
from edgeopt.runtime.reference import REFERENCE
from edgeopt.speed_claim_model import AGREE, PROCESSES, SpeedClaim


def reference_in() -> dict[str, str]:
    """backend -> how its FP32 is run for a speed claim's reference (its hooks' ``fp32_reference``)."""
    from edgeopt.converters.registry import backend_hooks

    return {b.value: h.fp32_reference for b, h in backend_hooks().items() if h.fp32_reference}


def claimed(manifest) -> tuple[ClaimSource, float, str] | None:
    """(source, estimated speed-up, runtime of its FP32) of the claim ``manifest`` carries, or None."""
    for row in manifest.backend_search:
        if row.verdict == "chosen" and row.speedup_vs_reference:
            return ClaimSource.BACKEND_AUTO, float(row.speedup_vs_reference), REFERENCE
    speed = _last_speed([s.report for s in manifest.stages])
    if speed is None or manifest.backend not in reference_in():
        return None
    return ClaimSource.INT8_VERDICT, float(speed["speedup_vs_fp32"]), manifest.backend


def _last_speed(obj) -> dict | None:
    """The last ``speed`` report with a ``speedup_vs_fp32`` (nested anywhere in the stage reports)."""
    found = None
    if isinstance(obj, dict):
        speed = obj.get("speed")
        if isinstance(speed, dict) and isinstance(speed.get("speedup_vs_fp32"), (int, float)):
            found = speed
        values = [v for k, v in obj.items() if k != "speed"]
    else:
        values = obj if isinstance(obj, list) else []
    for value in values:
        found = _last_speed(value) or found
    return found


def check_speed_claim(artifact: Path, manifest, model: Path, *, threads: int | None, inputs: str | None,
                      warn=None, judged: Path | None = None) -> SpeedClaim | None:
    """The claim ``manifest`` carries measured on ``artifact`` (None when it carries none): ``--backend auto``'s
    against the source ``model``, an INT8 verdict's against ``judged`` (the FP32 model the artifact was judged
    against; ``model`` when not given); ``warn`` gets the line saying the two figures differ by more than
    ``AGREE``."""
    from edgeopt.errors import EdgeoptError

    claim = claimed(manifest)
    if claim is None:
        return None
    try:
        result = measure_claim(artifact, judged if judged and claim[0] == ClaimSource.INT8_VERDICT else model, claim,
                               threads=threads, inputs=inputs)
    except EdgeoptError as err:  # the artifact holds; only its measurement failed (e.g. synthetic inputs refused)
        if warn:
            warn(f"speed: the written artifact could not be measured here ({err.one_line()[:200]}): the speed-up "
                 f"x{claim[1]:g} is the search's estimate only")
        return None
    if result.warning and warn:
        warn(result.warning)
    return result


def measure_claim(artifact: Path, model: Path, claim: tuple[ClaimSource, float, str], *, threads: int | None,
                  inputs: str | None) -> SpeedClaim:
    """``artifact`` and ``model`` (its FP32 reference) in the claim's runtime measured side by side by ``edgeopt
    bench`` (:func:`run_bench`), in one process when its speed-up agrees with the search's estimate, else in
    ``PROCESSES`` separate ones: the median process's figures are the claim, and every process's speed-up is
    kept."""
    from edgeopt.host import cpu_facts

    source, estimate, runtime = claim
    ref = fp32_reference(model, runtime)
    runs = [_one_process(artifact, ref, threads=threads, inputs=inputs)]
    if not _agrees(estimate, runs[0]["speedup"]):  # one process may run at another speed than the next
        runs += [_one_process(artifact, ref, threads=threads, inputs=inputs) for _ in range(PROCESSES - 1)]
    ups = [r["speedup"] for r in runs]
    mid = sorted(runs, key=lambda r: r["speedup"])[len(runs) // 2]
    measured = mid["speedup"]
    busy = next((r["busy"] for r in runs if r["busy"]), None)
    agree = _agrees(estimate, measured)
    spread = (f"; its {len(ups)} bench processes read " + ", ".join(f"x{u:g}" for u in ups) +
              " (the median is printed)") if len(ups) > 1 else ""
    warning = None if agree else (
        f"speed: the search estimated x{estimate:g} over FP32 but the written artifact measures x{measured:g} "
        f"({mid['artifact_ms']:.3g} ms vs {mid['reference_ms']:.3g} ms, bench's measuring){spread}: more than "
        f"{AGREE:.0%} apart; the measured figure is the one printed (confirm on a quiet machine with edgeopt bench)"
        + (f"; {busy}" if busy else ""))
    which = "the source model" if source == ClaimSource.BACKEND_AUTO else "the FP32 model it was judged against"
    return SpeedClaim(source=source, reference=f"{which} in {reference_in()[runtime]}", reference_artifact=str(ref),
                      estimate=estimate, measured=measured,
                      artifact_ms=mid["artifact_ms"], reference_ms=mid["reference_ms"], runs=mid["runs"],
                      processes=ups, agree=agree, threads=threads, machine=cpu_facts().get("model"), busy=busy,
                      warning=warning)


def _agrees(estimate: float, measured: float) -> bool:
    return measured > 0 and abs(estimate / measured - 1.0) <= AGREE


def _one_process(artifact: Path, ref: Path, *, threads: int | None, inputs: str | None) -> dict:
    """One ``edgeopt bench ARTIFACT REFERENCE`` process: both p50s, the speed-up, runs, and bench's busy line."""
    from edgeopt.runtime.environment import interference_warning

    out = run_bench([str(artifact), str(ref)], threads=threads, inputs=inputs)
    art, refrow = out["rows"][0], out["rows"][1]
    art_ms, ref_ms = float(art["latency_ms"]["p50"]), float(refrow["latency_ms"]["p50"])
    return {"speedup": round(ref_ms / art_ms, 3) if art_ms > 0 else 0.0, "artifact_ms": round(art_ms, 4),
            "reference_ms": round(ref_ms, 4), "runs": min(int(art["runs"]), int(refrow["runs"])),
            "busy": interference_warning(out.get("environment") or {})}


def run_bench(paths: list[str], *, threads: int | None, inputs: str | None) -> dict:
    """``edgeopt bench PATHS --no-store --json`` in its own Python process, as a user runs it (bench's defaults);
    its JSON object. Not in convert's process, so that nothing the search left there (other runtimes' thread pools,
    a large heap) can make the claim differ from what bench gives."""
    import json
    import subprocess
    import sys

    from edgeopt.errors import BadInputError

    argv = [sys.executable, "-m", "edgeopt", "bench", *paths, "--no-store", "--json"]
    argv += ["--threads", str(threads)] if threads else []
    argv += ["--inputs", inputs] if inputs else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    lines = done.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else {}
    except ValueError:
        out = {}
    if done.returncode != 0 or "rows" not in out or any(r.get("status") == "failed" for r in out["rows"]):
        why = ((out.get("error") or {}).get("message") if isinstance(out.get("error"), dict) else None) or \
            (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BadInputError(f"edgeopt bench of the written artifact failed: {why}"[:300],
                                "run edgeopt bench ARTIFACT REFERENCE --json to see why")
    return out


def fp32_reference(model: Path, runtime: str) -> Path:
    """The FP32 reference artifact of ``model`` in ``runtime``, kept in edgeopt's cache by content (bench's
    reference for ONNX Runtime; the ONNX file read by OpenVINO at the f32 hint for OpenVINO)."""
    from edgeopt.bench.api import reference_artifact
    from edgeopt.files import file_sha256

    model = Path(model)
    settings = None if runtime == REFERENCE else {"inference_precision": "f32"}
    return reference_artifact(model, file_sha256(model), runtime, settings)


def npz_inputs(o) -> str | None:
    """The .npz the artifact is measured on (its first sample): ``--eval``, else ``--calib``; None: bench's
    synthetic inputs."""
    for data in (o.eval, o.calib):
        if data is not None and str(data).endswith(".npz"):
            return str(data)
    return None
