"""The consumer check: the artifact loaded through its runtime's plain API, with only what it carries.

``load.py`` runs in a subprocess (``python -I``: no edgeopt code, no runner state) on the check samples; its
outputs must match edgeopt's runner within :data:`REL` x each output's scale (integer outputs: equal): the same
runtime with the same settings on the same machine computes the same function, so anything larger means a
setting the runner applies did not travel. A mismatch is exit 5 naming the runtime and the difference. The same
file with ``--bare`` (the runtime's defaults) is compared too, and only recorded: what a user who ignores
``load.py`` gets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from edgeopt.errors import EdgeoptError, GateFailedError

from .honours import carried_settings, hooks_for
from .model import CarriedSetting, ConsumerCheck, PlainLoad
from .writer import LOAD_PY, write_loaders

REL = 1e-4  # the float rule of --verify-on (remote/verify.py), here for any precision: nothing may round otherwise
TIMEOUT_S = 900
EXIT_STAGE = "exit_stage"  # a cascade's load.py output: the stage each sample left at (templates/load_cascade.py)
RULE = f"{REL:g} x each output's scale (integer outputs: equal): the same runtime, settings and machine"


def runtime_package(backend: str) -> str:
    """The pip distribution of the backend's device runtime (its ``Backend.device_runtime``); the backend's name
    where it declares none."""
    from edgeopt.converters.registry import get_backend

    try:
        runtime = get_backend(backend).device_runtime
    except (EdgeoptError, KeyError):
        runtime = None
    return runtime[1] if runtime else backend


def runtime_name(backend: str) -> str:
    from edgeopt.deps import version_of

    package = runtime_package(backend)
    return f"{package} {version_of(package) or '(not installed)'}"


def run_load_py(artifact_dir: Path, inputs: Path, outputs: Path, bare: bool = False) -> dict:
    """Run the artifact's ``load.py`` in a fresh isolated interpreter; what it reported it applied (the runtime's
    own facts, and under ``settings`` the settings it was given)."""
    cmd = [sys.executable, "-I", LOAD_PY, "--inputs", str(inputs), "--outputs", str(outputs)]
    done = subprocess.run(cmd + (["--bare"] if bare else []), cwd=artifact_dir, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GateFailedError(f"consumer check: {LOAD_PY}{' --bare' if bare else ''} failed (exit "
                              f"{done.returncode}): {last}",
                              "nothing was written; the artifact does not load through its runtime's plain API")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    said = json.loads(lines[-1]) if lines else {}
    return {**said.get("applied", {}), "settings": said.get("settings", {})}


def _stack(runs: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([np.asarray(r[k]) for r in runs]) for k in runs[0]}


def max_difference(host: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> tuple[float, str | None, bool]:
    """(the largest |got - host| relative to the rule, as an absolute difference; the worst output; whether every
    output is within :data:`REL` x its scale, integers equal)."""
    worst, worst_name, ok = 0.0, None, True
    for name, h in host.items():
        if name not in got or np.shape(got[name]) != np.shape(h):
            return float("inf"), name, False
        h64, g64 = h.astype(np.float64), np.asarray(got[name], np.float64)
        same_nonfinite = np.array_equal(np.isfinite(h64), np.isfinite(g64))
        finite = np.isfinite(h64) & np.isfinite(g64)
        diff = float(np.max(np.abs(g64 - h64)[finite])) if finite.any() else 0.0
        scale = float(np.max(np.abs(h64[np.isfinite(h64)]), initial=0.0))
        tol = 0.0 if h.dtype.kind in "iub" else REL * max(scale, 1e-12)
        ok = ok and same_nonfinite and diff <= tol
        if diff >= worst:
            worst, worst_name = diff, name
    return worst, worst_name, ok


def _host_outputs(artifact_dir: Path, manifest: dict, feeds: list[dict]) -> tuple[dict[str, np.ndarray], dict]:
    """The runner's outputs on ``feeds`` (stacked) and the properties the runtime reported to it (OpenVINO's)."""
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(artifact_dir), manifest=manifest) as runner:
        runs = []
        for f in feeds:
            out = runner.run(f)
            if hasattr(runner, "last_exits"):  # a cascade: where each sample left, which its load.py reports too
                out = {**out, EXIT_STAGE: np.asarray(runner.last_exits)}
            runs.append(out)
        return _stack(runs), dict(getattr(runner, "properties", None) or {})


def _check_settings(runtime: str, given: dict | None, manifest: dict) -> None:
    """Exit 5 unless ``load.py`` applied exactly the manifest's ``runtime.settings``."""
    expected = json.loads(json.dumps(manifest["runtime"].get("settings") or {}))
    given = json.loads(json.dumps(given or {}))
    wrong = sorted(k for k in {*expected, *given} if expected.get(k) != given.get(k))
    if wrong:
        said = ", ".join(f"{k}={given.get(k)!r}, judged at {expected.get(k)!r}" for k in wrong)
        raise GateFailedError(
            f"consumer check: {runtime} through {LOAD_PY}: the settings it applies differ from the manifest's "
            f"runtime.settings ({said})",
            "nothing was written; a setting edgeopt's runner applies is not carried by the artifact's load.py")


def check_as_deployed(artifact_dir: Path | str, manifest: dict, samples, *, version: str = "") -> ConsumerCheck:
    """Write ``load.py``/``load.cc`` into ``artifact_dir`` and run :func:`consumer_check` on ``samples`` (a
    Dataset). A staged early-exit artifact's ``load.py`` runs its cascade (each stage opened by the backend's own
    loader): its answers and the stage each sample left at are compared with edgeopt's cascade runner."""
    return consumer_check(artifact_dir, manifest, samples, files=write_loaders(artifact_dir, manifest, version))


def consumer_check(artifact_dir: Path | str, manifest: dict, samples, *, files: list[str]) -> ConsumerCheck:
    """The artifact's ``load.py`` (as it is in ``artifact_dir``) against edgeopt's runner on ``samples``, and with
    ``--bare``; exit 5 when ``load.py`` differs beyond the rule. ``files``: the loaders written (none: skipped)."""
    d = Path(artifact_dir)
    backend = manifest["runtime"]["backend"]
    settings = [CarriedSetting(**s) for s in carried_settings(backend, manifest["runtime"].get("settings") or {})]
    record = ConsumerCheck(runtime=runtime_name(backend), files=files, settings=settings, samples=len(samples),
                           rule=RULE)
    skipped = None if files else "no load.py for a backend registered from outside edgeopt"
    skipped = skipped or hooks_for(backend).not_loadable_here(manifest)
    if skipped:
        return record.model_copy(update={"skipped": skipped, "samples": 0})
    feeds = [samples.feed(i) for i in range(len(samples))]
    host, properties = _host_outputs(d, manifest, feeds)
    with tempfile.TemporaryDirectory(prefix="edgeopt-consumer-") as tmp:
        inputs = Path(tmp) / "inputs.npz"
        np.savez(inputs, **_stack(feeds))
        loads = {}
        for bare in (False, True):
            out = Path(tmp) / f"outputs{'-bare' if bare else ''}.npz"
            applied = run_load_py(d, inputs, out, bare=bare)
            with np.load(out) as f:
                got = {k: f[k] for k in f.files}
            diff, worst, ok = max_difference(host, got)
            how = f"python {LOAD_PY} --bare (the runtime's defaults)" if bare else f"python {LOAD_PY}"
            loads[bare] = (PlainLoad(how=how, applied=applied, max_abs_diff=diff, worst_output=worst), ok)
    (with_settings, ok), (bare_load, _) = loads[False], loads[True]
    _check_settings(record.runtime, with_settings.applied.pop("settings", None), manifest)
    differ = {k: (v, with_settings.applied.get(k)) for k, v in properties.items() if with_settings.applied.get(k) != v}
    if differ:
        ok = False
        with_settings.worst_output = "; ".join(f"{k} {got} through {LOAD_PY}, {v} in the runner"
                                               for k, (v, got) in differ.items())
    bare_load.applied.pop("settings", None)
    record = record.model_copy(update={"with_settings": with_settings, "bare": bare_load, "passed": ok,
                                       "relative_tolerance": REL})
    if not ok:
        raise GateFailedError(
            f"consumer check: {record.runtime} through {LOAD_PY} (the plain API, the artifact's settings only) "
            f"differs from edgeopt's runner: max |diff| {with_settings.max_abs_diff:.3g} (worst: "
            f"{with_settings.worst_output}; rule: {RULE})",
            "nothing was written; a setting edgeopt's runner applies is not carried by the artifact",
            details={"consumer_check": record.model_dump(mode="json")})
    return record
