"""``edgeopt remote-bench DEVICE... ARTIFACT`` (or ``--all ARTIFACT``): deploy and benchmark over SSH."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from edgeopt.bench.table import describe_throughput
from edgeopt.cli import app
from edgeopt.cli.chain_flags import chain_option
from edgeopt.cli.options import BatchOption, CalibOption, StreamsOption
from edgeopt.cli.output import JsonOption, emit, progress, stderr, stdout, write_json_line


def _fmt(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def _row(entry: dict) -> list[str]:
    if not entry["ok"]:
        return [entry["device"], "-", "-", "-", "-", "-", "-", "[red]FAILED[/]"]
    r = entry["result"]
    lat = r.get("latency_ms") or {}
    ident = r.get("identity") or {}
    where = f"[yellow]emulated on {ident.get('emulated_on') or 'this host'}[/]" if r.get("emulated") \
        else r.get("location", "")
    return [entry["device"], where, str(r.get("backend") or "-"), str(r.get("precision") or "-"),
            _fmt(lat.get("p50")), _fmt(lat.get("p90")), str(lat.get("n") or r.get("runs") or "-"), "ok"]


def _warnings(entries: list[dict]) -> list[str]:
    """Every device's warnings (busy machine, inputs), prefixed with its name."""
    return [f"{e['device']}: {w}" for e in entries if e["ok"] for w in e["result"].get("warnings") or []]


@app.command("remote-bench")
def remote_bench_cmd(
    targets: list[str] = typer.Argument(..., help="DEVICE... ARTIFACT: device names, then the artifact dir or .onnx model."),
    all_devices: bool = typer.Option(False, "--all", help="Every device in the inventory (then give only ARTIFACT)."),
    keep: bool = typer.Option(False, "--keep", help="Leave the run directory on the device."),
    accept_new_host_key: bool = typer.Option(False, "--accept-new-host-key",
                                             help="Trust and record an unknown host key (prints its fingerprint)."),
    inputs: Path = typer.Option(None, "--inputs", help=".npz of inputs named after the model's (default: random); the timings use its first sample."),
    outputs: Path = typer.Option(None, "--outputs", "--outputs-out",
                                 help="Also save the device's outputs for --inputs here (.npz, one device)."),
    threads: int = typer.Option(None, "--threads", help="Runtime threads on the device."),
    warmup: int = typer.Option(None, "--warmup", help="Warm-up runs."),
    min_runs: int = typer.Option(None, "--min-runs", help="Least timed runs."),
    min_seconds: float = typer.Option(None, "--min-seconds", help="Least seconds of timed runs."),
    streams: str = StreamsOption,
    batch: int = BatchOption,
    backend: str = chain_option("backend", context="With a model: "),
    precision: str = chain_option("precision", context="With a model: "),
    calib: Path = CalibOption,
    setup: bool = typer.Option(False, "--setup", help="Create a venv under the work dir and pip-install a missing runtime."),
    wheels: Path = typer.Option(None, "--wheels", help="With --setup: a folder of the device's wheels (offline boards)."),
    devices: Path = typer.Option(None, "--devices", help="Inventory file (default: $EDGEOPT_CONFIG_DIR/devices.toml)."),
    wait: float = typer.Option(300.0, "--wait", min=0, help="Seconds to wait for a board (or labgrid place) another "
                               "run holds; then exit 6 naming the holder. One measurement per board at a time."),
    json_out: bool = JsonOption,
) -> None:
    """Benchmark an artifact (or a model, converted for each device's profile) on devices over SSH.

    Devices run at once; one failing does not stop the others; the exit code is 6 if any failed.
    Timings from emulated devices are labelled 'emulated': they are not the board's speed.
    """
    from edgeopt.remote.bench import remote_bench_many

    devs = _devices(targets, all_devices, devices)
    artifact = targets[-1]
    if outputs and len(devs) != 1:
        from edgeopt.errors import UsageError

        raise UsageError("--outputs works with one device")
    convert_options, measure = _options(
        {"backend": backend, "precision": precision, "calib": calib},
        {"inputs": inputs, "outputs": outputs, "threads": threads, "warmup": warmup, "min_runs": min_runs,
         "min_seconds": min_seconds, "streams": streams, "batch": batch})
    kwargs = dict(options=measure, convert_options=convert_options, keep=keep, accept_new_host_key=accept_new_host_key,
                  setup=setup, wheels=wheels, devices_path=devices, wait=wait,
                  notify=lambda m: stderr.print(m, markup=False))

    with progress(json_out) as prog:
        tasks = {d.name: prog.add_task(d.name, total=100) for d in devs}

        def factory(name: str):
            def update(what: str, frac: float) -> None:
                prog.update(tasks[name], description=f"{name}: {what}", completed=round(100 * frac))
            return update

        entries = remote_bench_many(devs, artifact, progress_factory=factory, **kwargs)

    failed = [e for e in entries if not e["ok"]]
    payload = {
        "results": [e["result"] for e in entries if e["ok"]],
        "failed": [{"device": e["device"], **e["error"]} for e in failed],
        "warnings": _warnings(entries),
    }

    def human(c):
        _print_results(c, entries, payload["warnings"])

    if not failed:
        emit(json_out, payload, human)
        return
    if not json_out:
        human(stdout)  # the table on stdout whatever the exit code; the errors go to stderr
    _fail(devs, entries, payload, json_out)


def _devices(targets: list[str], all_devices: bool, devices: Path | None) -> list:
    """The devices named before the artifact, or with ``--all`` every device in the inventory."""
    from edgeopt.errors import UsageError
    from edgeopt.remote.inventory import get_device, load_devices

    if all_devices:
        if len(targets) != 1:
            raise UsageError("with --all give only the artifact", "edgeopt remote-bench --all ARTIFACT")
        devs = list(load_devices(devices).values())
        if not devs:
            raise UsageError("the inventory is empty", "add a device with 'edgeopt devices add'")
        return devs
    if len(targets) < 2:
        raise UsageError("give one or more devices, then the artifact", "edgeopt remote-bench pi5-lab ARTIFACT")
    return [get_device(n, devices) for n in dict.fromkeys(targets[:-1])]


def _options(convert_flags: dict, measure_flags: dict):
    """(ConvertOptions, BenchOptions) of the flags given: conversion's for a model, the runner's measurement."""
    from edgeopt.bench.api import BenchOptions
    from edgeopt.options import ConvertOptions, from_keywords

    convert_options = from_keywords(ConvertOptions, {k: v for k, v in convert_flags.items() if v},
                                    where="remote-bench")
    measure = from_keywords(BenchOptions, {k: v for k, v in measure_flags.items() if v is not None},
                            where="remote-bench")
    return convert_options, measure


def _print_results(c, entries: list[dict], warnings: list[str]) -> None:
    """The human report: the table, then each device's identity, warnings, cores, throughput and run id."""
    from edgeopt.identity import describe

    t = Table("device", "where", "backend", "precision", "p50 ms", "p90 ms", "runs", "status")
    for e in entries:
        t.add_row(*_row(e))
    c.print(t)
    ok = [e for e in entries if e["ok"]]
    if any(e["result"].get("emulated") for e in ok):
        c.print("[yellow]emulated[/]: timings on an emulated device (qemu/loopback) are not the board's speed")
    for e in ok:
        if e["result"].get("identity"):
            c.print(f"{e['device']}: measured on {describe(e['result']['identity'])}", markup=False)
    for w in warnings:
        c.print(f"warning: {w}", style="yellow", markup=False)
    for e in ok:
        cores = e["result"].get("cores")
        if cores and cores.get("note"):
            c.print(f"{e['device']}: cores: {cores['note']}", markup=False)
    for e in ok:
        tp = e["result"].get("throughput")
        for key in ("parallel", "batched"):
            if tp and tp.get(key):
                qps, x, how = describe_throughput(tp[key])
                c.print(f"{e['device']}: {key} {qps} q/s ({how}; x{x} of one stream's "
                        f"{tp.get('single_stream_qps')} q/s)", markup=False)
    for e in ok:
        if e["result"].get("memory"):
            from edgeopt.memory.bench_row import memory_text

            where = "peak RSS of the runner on the device" + (
                " (emulated: qemu's process, its translator included)" if e["result"].get("emulated") else "")
            c.print(memory_text(e["device"], e["result"]["memory"], where), markup=False)
    for e in ok:
        if e["result"].get("run_id"):
            c.print(f"{e['device']}: stored as run {e['result']['run_id']}")


def _fail(devs: list, entries: list[dict], payload: dict, json_out: bool) -> None:
    """Some device failed: one device raises its own error (exit code and hint); several print each failure and
    exit 6."""
    from edgeopt.errors import EdgeoptError

    failed = payload["failed"]
    if len(devs) == 1:
        err = [e for e in entries if not e["ok"]][0]["error"]
        exc = EdgeoptError(err["message"], err.get("hint"), details=err.get("details"))
        exc.exit_code, exc.kind = err["exit_code"], err["kind"]
        raise exc
    if json_out:
        write_json_line({"ok": False, **payload})
    for f in failed:
        line = f"{f['device']}: {f['message']}" + (f" ({f['hint']})" if f.get("hint") else "")
        sys.stderr.write(f"edgeopt: error: {line}\n")
    sys.stderr.write(f"edgeopt: {len(failed)} of {len(entries)} devices failed\n")
    raise typer.Exit(6)
