"""``remote_bench``: convert (if given a model), deploy, run and fetch a benchmark on a device.

The device runs ``python -m edgeopt_runtime bench artifact --json`` (the shipped copy of
``edgeopt/runtime``) inside a fresh run dir; progress lines stream back; the JSON result is
stored in the results store with the device's facts. Emulated devices are labelled
``location: emulated`` everywhere: their timings say nothing about the real board's speed.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from edgeopt.bench.api import BenchOptions
from edgeopt.enums import RunLocation
from edgeopt.errors import BadInputError, EdgeoptError, RemoteError, UsageError, did_you_mean
from edgeopt.identity import device_identity
from edgeopt.options import ConvertOptions
from edgeopt.run_record import RunRecord
from edgeopt.runtime.environment import interference_warning
from edgeopt.runtime.measure import read_artifact

from . import board_lock, deploy
from .cores import core_plan, pin_argv
from .inventory import Device, get_device
from .probe import open_transport, python_argv, quick_facts
from .setup import ensure_runtime
from .transport import Transport

OUTPUTS_FILE = "outputs.npz"  # the runner's outputs for inputs.npz, in the run dir
RUNNER_NOTE = "edgeopt runtime: "  # a runner's stderr line for the result's warnings (runtime/runners/onnxruntime.py)
STEP_TEXT = {"convert": "converting the model", "connect": "connecting", "upload": "uploading the artifact",
             "bench": "running the benchmark", "fetch": "fetching the outputs", "store": "storing the result"}


def _location(device: Device) -> RunLocation:
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


def _parse_result(device: Device, stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    raise RemoteError(f"{device.name}: the runner printed no JSON result", stdout[-300:] or None)


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


def _plain_error(err: RemoteError, dev: Device, step: str) -> RemoteError:
    """The transport's error, saying which step was running (not "while running 'sh'") and, for an
    emulated device that is down, how to start it."""
    message = re.sub(r"while running '[^']*'", f"while {STEP_TEXT.get(step, step)}", err.message)
    message = re.sub(r"before '[^']*' started", f"before {STEP_TEXT.get(step, step)}", message)
    hint = err.hint
    if dev.emulated and step == "connect" and "fingerprint" not in err.details:  # a host-key refusal keeps its own hint
        hint = (f"the emulated device may be stopped: start it with 'edgeopt emulate start {dev.profile} "
                f"--name {dev.name}'")
    out = RemoteError(message, hint, details={**err.details, "step": step})
    out.exit_code, out.kind = err.exit_code, err.kind
    return out


def _energy(dev: Device, result: dict) -> dict:
    """Energy and cost from the profile of the machine that ran it: the board's; none for an emulated one."""
    from edgeopt.bench.energy import energy_figures

    if dev.emulated:
        return {"source": "unavailable", "joules_per_inference": None, "cost_per_1k_queries": None,
                "note": "emulated device: qemu on this host, no energy figure for the board"}
    try:
        from edgeopt.profiles import load_profile

        tdp = load_profile(dev.profile).tdp_w
    except EdgeoptError:
        tdp = None
    return energy_figures(result, tdp_w=tdp)


def _still_in_inventory(dev: Device, devices_path) -> bool:
    """The device is still in the inventory as it was (an emulator stopped mid-run drops its entry)."""
    from .inventory import load_devices

    now = load_devices(devices_path).get(dev.name)
    return now is not None and (now.host, now.port) == (dev.host, dev.port)


def _artifact_for(device: Device, artifact_or_model: str | Path, tmp: Path, convert_options: ConvertOptions | None,
                  progress) -> Path:
    src = Path(artifact_or_model)
    if src.is_dir():
        return src
    if src.is_file() and src.suffix == ".onnx":
        from edgeopt.convert import convert

        out = tmp / "artifact"
        convert(str(src), device.profile, str(out), convert_options or ConvertOptions())
        return out
    raise BadInputError(f"'{src}' is neither an artifact directory nor an .onnx model", "check the path")


# what of BenchOptions a device's runner measures with (the rest is local bench's); ``store``/``db``: the results store
REMOTE_BENCH_FIELDS = ("threads", "warmup", "min_runs", "min_seconds", "streams", "batch", "inputs", "outputs",
                       "store", "db")


def bench_options(options: BenchOptions | None, keywords: dict) -> BenchOptions:
    """``remote_bench``'s measurement options from a :class:`BenchOptions` or its keywords (``outputs_to``:
    ``outputs``); an unknown keyword or a field a device does not measure with is exit 2, one line."""
    from edgeopt.options import from_keywords

    if "outputs_to" in keywords:
        keywords = {**{k: v for k, v in keywords.items() if k != "outputs_to"}, "outputs": keywords["outputs_to"]}
    if options is not None and keywords:
        raise UsageError(f"remote_bench: give the measurement options as BenchOptions or as keywords, not both "
                         f"({', '.join(keywords)})")
    for key in keywords:  # a misspelt keyword of remote_bench's own (keeep=True) is named too
        if key not in BenchOptions.model_fields:
            import inspect

            known = [*REMOTE_BENCH_FIELDS, *(p for p in inspect.signature(remote_bench).parameters if p != "measure")]
            raise UsageError(f"remote_bench: unknown option '{key}'",
                             did_you_mean(key, known) or f"known options: {', '.join(known)}")
    o = options if options is not None else from_keywords(BenchOptions, keywords, where="remote_bench")
    local_only = sorted(set(o.model_fields_set) - set(REMOTE_BENCH_FIELDS))
    if local_only:
        raise UsageError(f"remote_bench: {', '.join(local_only)} is measured by local bench only",
                         f"a device's runner takes: {', '.join(REMOTE_BENCH_FIELDS)}")
    return o


def _convert_options(given: ConvertOptions | dict | None) -> ConvertOptions | None:
    if given is None or isinstance(given, ConvertOptions):
        return given
    from edgeopt.options import from_keywords

    return from_keywords(ConvertOptions, dict(given), where="remote_bench convert_options")


def remote_bench(
    device: Device | str,
    artifact_or_model: str | Path,
    options: BenchOptions | None = None,
    *,
    convert_options: ConvertOptions | dict | None = None,
    keep: bool = False,
    accept_new_host_key: bool = False,
    setup: bool = False,
    wheels: str | Path | None = None,
    progress: Callable[[str, float], None] | None = None,
    devices_path: str | Path | None = None,
    transport: Transport | None = None,
    runtime_dir: str | Path | None = None,
    max_age_hours: float = 24.0,
    timeout: float = 3600.0,
    cancel: threading.Event | None = None,
    notify=None,
    wait: float = board_lock.DEFAULT_WAIT_S,
    all_samples: bool = False,
    **measure,
) -> RunRecord:
    """Benchmark an artifact (or an .onnx model, converted for the device's profile with ``convert_options``,
    a :class:`edgeopt.options.ConvertOptions`) on ``device``. ``options``: how to measure (a
    :class:`edgeopt.bench.api.BenchOptions`: threads, warmup, min_runs, min_seconds, streams, batch, inputs,
    outputs, store, db), or the same as keywords (``min_runs=3``; ``outputs_to`` for ``outputs``). ``all_samples``:
    the outputs file holds every sample of ``inputs`` (stacked on a new first axis), not only the first's."""
    o = bench_options(options, measure)
    co = _convert_options(convert_options)
    dev = device if isinstance(device, Device) else get_device(device, devices_path)
    report = progress or (lambda what, frac: None)
    current = ["convert"]
    listed = _still_in_inventory(dev, devices_path)  # then it must still be there when the result is stored
    if o.store:  # a store that can't take the result fails before the device is touched
        from edgeopt.results import check_store_writable

        check_store_writable(o.db)

    def step(what: str, frac: float) -> None:
        current[0] = what
        report(what, frac)

    try:
        return _remote_bench(dev, artifact_or_model, step, o, keep=keep, accept_new_host_key=accept_new_host_key,
                             setup=setup, wheels=wheels, convert_options=co,
                             devices_path=devices_path, transport=transport, runtime_dir=runtime_dir,
                             max_age_hours=max_age_hours, timeout=timeout, cancel=cancel, notify=notify,
                             listed=listed, wait=wait, all_samples=all_samples)
    except RemoteError as err:
        raise _plain_error(err, dev, current[0]) from err


@dataclass
class _Staged:
    """The artifact ready to upload: where it is, its files' hashes, what was converted (None: given built)."""

    artifact: Path
    listed_files: dict
    converted: dict | None
    files: list
    manifest: dict


@dataclass
class _Ran:
    """What one run on the device gave: the runner's result and the facts around it."""

    result: dict
    facts: dict
    cores: dict
    stats: object  # deploy.upload's statistics
    cleaned: object
    runner_said: list[str]


def _remote_bench(dev: Device, artifact_or_model, step, o: BenchOptions, *, keep, accept_new_host_key, setup,
                  wheels, convert_options: ConvertOptions | None, devices_path, transport, runtime_dir,
                  max_age_hours, timeout, cancel, notify, listed, wait, all_samples=False) -> RunRecord:
    if o.outputs and not o.inputs:
        raise BadInputError("--outputs needs --inputs (an .npz of the model's inputs)")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edgeopt-remote-") as tmp_str:
        step("connect", 0.0)  # first: a device that does not answer fails in seconds, not after a conversion
        own = transport is None
        tr = transport or open_transport(dev, accept_new_host_key=accept_new_host_key, notify=notify, wait=wait,
                                         cancel=cancel)
        if cancel is not None:
            tr.cancel = cancel
        try:
            step("convert", 0.0)
            staged = _stage(dev, artifact_or_model, Path(tmp_str), convert_options, step, o.inputs, runtime_dir)
        except BaseException:
            if own:
                tr.close()
            raise
        run_dir = deploy.new_run_dir()
        try:
            ran = _run_on_device(tr, dev, run_dir, staged, o, step, setup=setup, wheels=wheels,
                                 max_age_hours=max_age_hours, timeout=timeout, notify=notify, wait=wait,
                                 all_samples=all_samples)
        finally:
            _leave_run_dir(tr, run_dir, keep=keep, close=own)
    result = _described(dev, ran, staged, run_dir=f"{tr.work_dir}/{run_dir}" if keep else None,
                        labgrid=tr.lease.describe() if hasattr(tr, "lease") else None,  # the board-farm place
                        wall_s=time.monotonic() - t0, inputs=o.inputs)
    if listed and not _still_in_inventory(dev, devices_path):
        raise RemoteError(f"{dev.name}: the device left the inventory during the run (emulate stop or devices "
                          "remove); its result is not stored", "start it again and rerun",
                          details={"result": result})
    record = RunRecord.model_validate(result)
    if o.store:
        from edgeopt.results import store_run

        step("store", 1.0)
        record.run_id = store_run(record, o.db)
    return record


def _stage(dev: Device, artifact_or_model, tmp: Path, convert_options: ConvertOptions | None, step, inputs,
           runtime_dir) -> _Staged:
    """The artifact (converted first when given a model), checked, and the files to upload with it."""
    from edgeopt.artifact import verify_artifact

    artifact = _artifact_for(dev, artifact_or_model, tmp, convert_options, step)
    listed_files = verify_artifact(artifact)  # sha256 before upload, and on the device after it
    converted = None if artifact == Path(artifact_or_model) else {
        "model": str(Path(artifact_or_model).resolve()), "profile": dev.profile,
        **(convert_options.model_dump(mode="json", exclude_unset=True) if convert_options else {})}
    return _Staged(artifact, listed_files, converted, deploy.bundle_files(artifact, runtime_dir, inputs),
                   read_artifact(str(artifact)))


def _run_on_device(tr: Transport, dev: Device, run_dir: str, staged: _Staged, o: BenchOptions, step, *, setup,
                   wheels, max_age_hours, timeout, notify, wait, all_samples) -> _Ran:
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

    argv = pin_argv(_bench_argv(python, _location(dev), inputs=bool(o.inputs), threads=cores["threads"],
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
    return _Ran(result, facts, cores, stats, cleaned, runner_said)


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
    if res.rc != 0:
        tail = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith('{"progress"')]
        raise RemoteError(
            f"{dev.name}: the runner failed with exit {res.rc}: {(tail or ['(no message)'])[-1][:300]}",
            details={"stdout": res.stdout[-2000:], "stderr": res.stderr[-4000:]},
        )


def _leave_run_dir(tr: Transport, run_dir: str, *, keep: bool, close: bool) -> None:
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


def _described(dev: Device, ran: _Ran, staged: _Staged, *, run_dir: str | None, labgrid, wall_s: float,
               inputs) -> dict:
    """The runner's result with where and how it ran: the device, its identity, energy, warnings."""
    location = _location(dev)
    result = ran.result
    result.pop("ok", None)
    result.update({
        "device": dev.name,
        "device_profile": dev.profile,
        "location": location.value,
        "emulated": dev.emulated,
        "timings_label": "emulated (qemu/loopback: not the board's speed)" if dev.emulated else "measured on device",
        "artifact": str(staged.artifact.resolve()) if staged.converted is None else None,  # a temporary one is gone
        "artifact_on_device": result.get("artifact"),
        "converted": staged.converted,
        "device_facts": ran.facts,
        "cores": {**ran.cores, "used": (result.get("environment") or {}).get("cores_used")},
        "upload": ran.stats.to_dict(),
        "run_dir": run_dir,
        "cleaned_stale_runs": ran.cleaned,
        "wall_seconds": round(wall_s, 3),
        "labgrid": labgrid,
    })
    result.setdefault("environment", {})["location"] = location.value
    result["identity"] = device_identity(dev.name, dev.profile, emulated=dev.emulated, env=result["environment"],
                                         facts=ran.facts, built_for=result.get("profile"))
    result["energy_figures"] = _energy(dev, result)
    warnings = result.setdefault("warnings", [])
    warnings.extend(w for w in ran.runner_said if w not in warnings)
    if (busy := interference_warning(result["environment"])):
        warnings.append(busy)
    if inputs:
        from edgeopt.bench.api import note_inputs_used

        note_inputs_used(result, staged.manifest["inputs"], str(inputs))
    return result


def remote_bench_many(devices: list[Device], artifact_or_model: str | Path, *, progress_factory=None,
                      max_workers: int | None = None, **kwargs) -> list[dict]:
    """``remote_bench`` on several devices at once (threads). One failing device does not stop the
    others: each entry is ``{"device", "ok": True, "result"}`` or ``{"device", "ok": False, "error"}``."""
    cancel = threading.Event()

    def one(dev: Device) -> dict:
        prog = progress_factory(dev.name) if progress_factory else None
        try:
            res = remote_bench(dev, artifact_or_model, progress=prog, cancel=cancel, **kwargs)
            return {"device": dev.name, "ok": True, "result": res}
        except EdgeoptError as err:
            return {"device": dev.name, "ok": False, "error": err.to_json()}
        except Exception as err:  # noqa: BLE001 - one board's surprise must not hide the others
            return {"device": dev.name, "ok": False,
                    "error": {"kind": "internal", "exit_code": 1, "message": f"{type(err).__name__}: {err}"}}

    pool = ThreadPoolExecutor(max_workers=max_workers or max(1, len(devices)))
    futures = [pool.submit(one, d) for d in devices]
    try:
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        cancel.set()  # each transport kills its remote process and returns
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=False)
