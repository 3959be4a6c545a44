"""One benchmark run on a device: stale runs cleaned, the artifact uploaded into a fresh run dir, the shipped runner
run there with the asked measurement options, its streamed lines and exit read, the outputs fetched, the run dir left."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from edgeopt.bench.api import BenchOptions
from edgeopt.enums import RunLocation
from edgeopt.errors import DeviceRefusedError, EdgeoptError, RemoteError
from edgeopt.runtime.measure import BadArtifact

from . import board_lock, deploy
from .cores import core_plan, pin_argv
from .inventory import Device
from .probe import python_argv, quick_facts
from .setup import ensure_runtime
from .staging import Staged
from .transport import Transport

OUTPUTS_FILE = "outputs.npz"  # the runner's outputs for inputs.npz, in the run dir
RUNNER_NOTE = "edgeopt runtime: "  # a runner's stderr line for the result's warnings (runtime/runners/onnxruntime.py)


def location_of(device: Device) -> RunLocation:
    return RunLocation.EMULATED if device.emulated else RunLocation.REMOTE


def _bench_argv(python: list[str], location: RunLocation, *, inputs: bool, threads, warmup, min_runs,
                min_seconds, outputs: bool = False, streams=None, batch=None, all_samples: bool = False) -> list[str]:
    argv = [*python, "-m", deploy.RUNTIME_NAME, "bench", "artifact", "--json", "--location", location.value]
    for flag, value in (("--threads", threads), ("--warmup", warmup), ("--min-runs", min_runs),
                        ("--min-seconds", min_seconds), ("--streams", streams), ("--batch", batch)):
        if value is not None:
            argv += [flag, str(value)]
    if inputs:
        argv += ["--inputs", "inputs.npz"]
    if outputs:
        argv += ["--outputs-out", OUTPUTS_FILE] + (["--all-samples"] if all_samples else [])
    return argv


def with_work_dir(python: list[str], tr: Transport, manifest: dict) -> list[str]:
    """The runner's command with ``EDGEOPT_WORK_DIR`` set when the artifact keeps files in the device's work dir
    (``{work_dir}`` in its runtime settings: ONNX Runtime's TensorRT engine cache, built at the first run there)."""
    if "{work_dir}" not in json.dumps((manifest.get("runtime") or {}).get("settings") or {}):
        return python
    return ["env", f"EDGEOPT_WORK_DIR={tr.work_dir}", *python]


def _last_json(stdout: str) -> dict | None:
    """The runner's result: the last line of its stdout that is a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _parse_result(device: Device, stdout: str) -> dict:
    obj = _last_json(stdout)
    if obj is None:
        raise RemoteError(f"{device.name}: the runner printed no JSON result", stdout[-300:] or None)
    return obj


def fetch_atomic(tr: Transport, remote: str, local: Path) -> None:
    """``remote`` to ``local`` through a temporary sibling, so a failed copy leaves nothing behind."""
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.part")
    try:
        tr.get(remote, str(tmp))
        tmp.replace(local)
    except OSError as err:
        raise RemoteError(f"{tr.name}: cannot fetch the outputs: {err}") from err
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class Ran:
    """What one run on the device gave: the runner's result and the facts around it."""

    result: dict
    facts: dict
    cores: dict
    stats: object  # deploy.upload's statistics
    cleaned: object
    runner_said: list[str]


def run_on_device(tr: Transport, dev: Device, run_dir: str, staged: Staged, o: BenchOptions, step, *, setup,
                   wheels, max_age_hours, timeout, notify, wait, all_samples) -> Ran:
    """Clean stale runs, upload into ``run_dir``, run the benchmark there, and fetch the outputs when asked."""
    cleaned = deploy.clean_stale(tr, max_age_hours)
    facts = quick_facts(tr)
    if dev.emulated:
        facts["note"] = ("emulated device: these are the emulating host's shell facts; the runner's own "
                         "(emulated) CPU and libraries are in 'environment'")
    tr.run(["mkdir", "-p", "--", tr.confine(run_dir)], timeout=60)
    deploy.write_lock(tr, run_dir)
    stats = deploy.upload(tr, staged.files, run_dir, progress=lambda f: step("upload", f))
    deploy.verify_uploaded(tr, run_dir, staged.listed_files)
    python = [facts["venv"]] if facts.get("venv") else python_argv(dev)
    if setup:
        python = ensure_runtime(tr, dev, python, staged.artifact, wheels)
    cores = core_plan(dev, facts, o.threads)
    python = with_work_dir(python, tr, staged.manifest)

    def given(name: str):  # only what was asked goes on the runner's command line (its defaults are BenchOptions')
        return getattr(o, name) if name in o.model_fields_set else None

    argv = pin_argv(_bench_argv(python, location_of(dev), inputs=bool(o.inputs), threads=cores["threads"],
                                warmup=given("warmup"), min_runs=given("min_runs"), min_seconds=given("min_seconds"),
                                streams=given("streams"), batch=given("batch"), outputs=bool(o.outputs),
                                all_samples=all_samples) + board_lock.runner_args(tr, dev, wait), cores)
    runner_said: list[str] = []
    step("bench", 0.0)
    res = tr.run(["sh", "-c", deploy.RUN_WRAPPER, "edgeopt-run", tr.confine(run_dir), *argv],
                 timeout=timeout, stream=_runner_stream(dev, step, notify, wait, runner_said))
    _check_exit(dev, res, python, wait)
    result = _parse_result(dev, res.stdout)
    if o.outputs:
        step("fetch", 1.0)
        fetch_atomic(tr, f"{run_dir}/{OUTPUTS_FILE}", Path(o.outputs))
    return Ran(result, facts, cores, stats, cleaned, runner_said)


def _runner_stream(dev: Device, step, notify, wait: float, runner_said: list[str]):
    """The callback for the runner's streamed lines: its notes (kept in ``runner_said``), a board-lock wait
    (told through ``notify``) and its progress."""
    def stream(kind: str, line: str) -> None:
        if kind == "stderr" and line.startswith(RUNNER_NOTE):  # e.g. which ONNX Runtime provider ran
            runner_said.append(line[len(RUNNER_NOTE):].strip())
        if kind == "stderr" and line.startswith('{"board_lock"') and notify:
            if (msg := board_lock.waiting_message(dev, line, wait)):
                notify(msg)
        if kind == "stderr" and line.startswith('{"progress"'):
            try:
                step("bench", float(json.loads(line)["progress"]))
            except (ValueError, KeyError, TypeError):
                pass

    return stream


def _check_exit(dev: Device, res, python: list[str], wait: float) -> None:
    """The runner's exit as an error: the board busy, its runtime (or numpy) missing, any other failure."""
    if res.rc == board_lock.EXIT_BOARD_BUSY:
        raise board_lock.busy_error(dev, res.stdout, wait)
    missing = re.search(r"No module named '([\w.]+)'", res.stderr) if res.rc != 0 else None
    if res.rc == 4 or missing:  # 4: the runtime; a bare ImportError: numpy itself
        what = f"'{missing.group(1)}'" if missing else "the artifact's runtime"
        raise RemoteError(
            f"{dev.name}: {what} is not installed for {' '.join(python)} on the device",
            "rerun with --setup to pip-install it in a venv under the work dir (--wheels DIR for boards "
            "without internet)", details={"stderr": res.stderr[-2000:]},
        )
    error = (_last_json(res.stdout) or {}).get("error") if res.rc != 0 else None
    refused = error if isinstance(error, dict) else {}  # the runner's {"ok": false, "error": {"kind": …}}
    if refused.get("kind") == BadArtifact.kind:  # the runtime there can't run this artifact: no connection fault
        raise DeviceRefusedError(f"{dev.name}: the device's runtime could not run the artifact: "
                                 f"{str(refused.get('message', ''))[:600]}",
                                 details={"stdout": res.stdout[-2000:], "stderr": res.stderr[-4000:]})
    if res.rc != 0:
        tail = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith('{"progress"')]
        raise RemoteError(
            f"{dev.name}: the runner failed with exit {res.rc}: {(tail or ['(no message)'])[-1][:300]}",
            details={"stdout": res.stdout[-2000:], "stderr": res.stderr[-4000:]},
        )


def leave_run_dir(tr: Transport, run_dir: str, *, keep: bool, close: bool) -> None:
    """Release (``keep``) or remove the run dir, then close the transport if it is ours; a connection already
    gone leaves the dir to the next run's cleaning."""
    try:
        if keep:
            deploy.release_lock(tr, run_dir)
        else:
            deploy.remove_run(tr, run_dir)
    except EdgeoptError:
        pass  # the connection is gone: the next run cleans this dir
    finally:
        if close:
            tr.close()
