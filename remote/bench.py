"""``remote_bench``: convert (if given a model), deploy, run and fetch a benchmark on a device.

The device runs ``python -m edgeopt_runtime bench artifact --json`` (the shipped copy of
``edgeopt/runtime``) inside a fresh run dir; progress lines stream back; the JSON result is
stored in the results store with the device's facts. Emulated devices are labelled
``location: emulated`` everywhere: their timings say nothing about the real board's speed.
"""

from __future__ import annotations

import re
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from edgeopt.bench.api import BenchOptions
from edgeopt.errors import BadInputError, EdgeoptError, RemoteError, UsageError, did_you_mean
from edgeopt.options import ConvertOptions
from edgeopt.run_record import RunRecord

from . import board_lock, deploy
from .bench_result import described
from .device_run import leave_run_dir, run_on_device
from .inventory import Device, get_device
from .probe import open_transport
from .staging import stage_artifact
from .transport import Transport

STEP_TEXT = {"convert": "converting the model", "connect": "connecting", "upload": "uploading the artifact",
             "bench": "running the benchmark", "fetch": "fetching the outputs", "store": "storing the result"}


def _plain_error(err: RemoteError, dev: Device, step: str) -> RemoteError:
    """The transport's error, saying which step was running (not "while running 'sh'") and, for an
    emulated device that is down, how to start it."""
    message = re.sub(r"while running '[^']*'", f"while {STEP_TEXT.get(step, step)}", err.message)
    message = re.sub(r"before '[^']*' started", f"before {STEP_TEXT.get(step, step)}", message)
    hint = err.hint
    if dev.emulated and step == "connect" and "fingerprint" not in err.details:  # a host-key refusal keeps its own hint
        hint = (f"the emulated device may be stopped: start it with 'edgeopt emulate start {dev.profile} "
                f"--name {dev.name}'")
    out = type(err)(message, hint, details={**err.details, "step": step})  # its class: convert falls back on some
    out.exit_code, out.kind = err.exit_code, err.kind
    return out


def _still_in_inventory(dev: Device, devices_path) -> bool:
    """The device is still in the inventory as it was (an emulator stopped mid-run drops its entry)."""
    from .inventory import load_devices

    now = load_devices(devices_path).get(dev.name)
    return now is not None and (now.host, now.port) == (dev.host, dev.port)


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
            staged = stage_artifact(dev, artifact_or_model, Path(tmp_str), convert_options, step, o.inputs, runtime_dir)
        except BaseException:
            if own:
                tr.close()
            raise
        run_dir = deploy.new_run_dir()
        try:
            ran = run_on_device(tr, dev, run_dir, staged, o, step, setup=setup, wheels=wheels,
                                 max_age_hours=max_age_hours, timeout=timeout, notify=notify, wait=wait,
                                 all_samples=all_samples)
        finally:
            leave_run_dir(tr, run_dir, keep=keep, close=own)
    result = described(dev, ran, staged, run_dir=f"{tr.work_dir}/{run_dir}" if keep else None,
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
