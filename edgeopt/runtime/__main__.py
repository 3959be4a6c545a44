"""Device-side runner: ``python -m edgeopt.runtime bench ARTIFACT_DIR [...]``.

On a device this package is copied as ``edgeopt_runtime`` and run as
``python3 -m edgeopt_runtime bench ...``: standard library + numpy + the artifact's runtime,
relative imports only. Prints one JSON result on stdout; progress goes to stderr as JSON
lines (``{"progress": 0.5}``) so a remote caller can stream it.
Exit codes: 0 ok, 2 usage, 3 bad artifact or inputs, 4 runtime missing, 75 board busy (--board-lock).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import board_lock, environment
from .measure import (
    BadArtifact,
    check_runs,
    feeds_from_npz,
    measure,
    npz_samples,
    open_artifact,
    run_record,
    synthetic_feeds,
)
from .memory import Phases
from .throughput import measure_throughput, parse_streams, throughput_asked, throughput_seconds

EXIT_OK, EXIT_USAGE, EXIT_BAD_ARTIFACT, EXIT_RUNTIME_MISSING = 0, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edgeopt_runtime", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="measure one artifact and print one JSON result")
    b.add_argument("artifact_dir")
    b.add_argument("--inputs", help=".npz with arrays named after the inputs (sample 0 is used)")
    b.add_argument("--threads", type=int)
    b.add_argument("--warmup", type=int, default=10)
    b.add_argument("--min-runs", type=int, default=50)
    b.add_argument("--min-seconds", type=float, default=2.0)
    b.add_argument("--max-runs", type=int, default=100_000)
    b.add_argument("--max-seconds", type=float, default=600.0)
    b.add_argument("--streams", help="also measure N requests in flight at once ('auto': the backend's choice)")
    b.add_argument("--batch", type=int, help="also measure one stream at this batch size (symbolic batch dims only)")
    b.add_argument("--throughput-seconds", type=float, default=None,
                   help="seconds for each throughput measurement (default: --min-seconds, at least 1)")
    b.add_argument("--location", choices=("local", "emulated", "remote"), default="local")
    b.add_argument("--samples-out", help="also write the per-run latencies (ms) to this file, one a line")
    b.add_argument("--outputs-out", help="also write the outputs for the (first) input to this .npz (ONNX names)")
    b.add_argument("--all-samples", action="store_true",
                   help="with --inputs and --outputs-out: the outputs of every sample, stacked on a new first axis")
    b.add_argument("--json", action="store_true", help="accepted for symmetry: the output is always JSON")
    b.add_argument("--board-lock", help="hold this lock file exclusively for the whole measurement (one per board)")
    b.add_argument("--lock-wait", type=float, default=300.0, help="seconds to wait for the board lock (then exit 75)")
    b.add_argument("--lock-owner", default="{}", help="JSON naming the caller (host, pid, device), for waiters")
    b.add_argument("--no-board-lock", action="store_true",
                   help="measure without the board lock, recorded as exclusive: false (for measuring contention only)")
    return p


def _progress(frac: float) -> None:
    sys.stderr.write(json.dumps({"progress": frac}) + "\n")
    sys.stderr.flush()


def _fail(code: int, kind: str, message: str) -> int:
    sys.stdout.write(json.dumps({"ok": False, "error": {"kind": kind, "exit_code": code, "message": message}}) + "\n")
    sys.stderr.write(f"edgeopt_runtime: error: {message}\n")
    return code


def save_outputs(outputs: dict, path: str) -> None:
    """The outputs as an .npz (ONNX names), written atomically."""
    import numpy as np

    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in outputs.items()})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _lock_waiting(holder: dict | None, waited: float) -> None:
    sys.stderr.write(json.dumps({"board_lock": {"waiting": True, "holder": holder, "waited_s": round(waited, 1)}})
                     + "\n")
    sys.stderr.flush()


def bench(args: argparse.Namespace) -> dict:
    """The measurement, inside the board lock when one is asked (held from the load read before to the
    load read after, so 'what else ran meanwhile' covers exactly the locked time)."""
    if not args.board_lock:
        result = _bench(args)
        if args.no_board_lock:
            result["exclusive"] = False
            result["board_lock"] = board_lock.no_lock_info("--no-board-lock: measured without reserving the board")
        return result
    try:
        owner = json.loads(args.lock_owner)
    except ValueError:
        owner = {}
    with board_lock.BoardLock(args.board_lock, owner if isinstance(owner, dict) else {}).acquire(
            args.lock_wait, _lock_waiting) as lock:
        result = _bench(args)
    result["exclusive"] = True
    result["board_lock"] = lock.info
    return result


def _all_outputs(runner, manifest: dict, args: argparse.Namespace) -> dict:
    """Every sample of --inputs run once; each output stacked over the samples (a new first axis)."""
    import numpy as np

    runs = [runner.run(feeds_from_npz(manifest["inputs"], args.inputs, i))
            for i in range(npz_samples(manifest["inputs"], args.inputs))]
    return {name: np.stack([np.asarray(r[name]) for r in runs]) for name in runs[0]}


def _bench(args: argparse.Namespace) -> dict:
    env = environment.collect(args.location, libraries=environment.recorded_libraries(args.artifact_dir))
    t_start = time.time()
    memory = Phases()
    runner, manifest, load_ms = open_artifact(args.artifact_dir, threads=args.threads)
    memory.mark("load")
    if args.inputs:
        feeds, synthetic = feeds_from_npz(manifest["inputs"], args.inputs), False
    else:
        feeds, synthetic = synthetic_feeds(manifest["inputs"]), True
    check_runs(runner, feeds, args.artifact_dir)
    memory.mark("first_inference")
    if args.outputs_out:
        save_outputs(_all_outputs(runner, manifest, args) if args.all_samples and args.inputs else runner.run(feeds),
                     args.outputs_out)
    meter = environment.open_power_meter()
    if meter is not None:
        meter.start()
    try:
        measured = measure(
            lambda: runner.run(feeds), warmup=args.warmup, min_runs=args.min_runs, min_seconds=args.min_seconds,
            max_runs=args.max_runs, max_seconds=args.max_seconds, progress=_progress, load_ms=load_ms,
            threads=args.threads or getattr(runner, "threads", None),
        )
        energy = meter.stop() if meter is not None else None
        meter = None
        streams = parse_streams(args.streams)
        if throughput_asked(streams, args.batch):
            measured["throughput"] = measure_throughput(
                runner, lambda t: open_artifact(args.artifact_dir, threads=t)[0], feeds, manifest["inputs"],
                streams=streams, batch=args.batch, threads=args.threads,
                seconds=throughput_seconds(args.throughput_seconds, args.min_seconds),
                single_stream_qps=measured["throughput_qps"])
        memory.mark("steady")
    finally:
        if meter is not None:
            energy = meter.stop()
        close = getattr(runner, "close", None)
        if close:
            close()
    if energy is not None:
        calls = measured["runs"] + measured["warmup"]
        energy["joules_per_inference"] = energy["joules"] / calls if calls else None
    t_end = time.time()
    environment.after(env)
    env["measured_unix"] = [t_start, t_end]  # wall-clock window of load, warm-up and timed runs
    record = run_record(args.artifact_dir, manifest, measured, env=env, energy=energy, synthetic=synthetic,
                        inputs_source=args.inputs)
    if memory.result():
        record["memory"] = memory.result()
    if getattr(runner, "execution", None):  # which provider ran it and how (CUDA: Q/DQ as float with Q/DQ kernels)
        record["execution"] = runner.execution
    return record


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        parse_streams(args.streams)
    except ValueError:
        parser.error(f"--streams must be a count >= 1 or 'auto', not '{args.streams}'")
    try:
        result = bench(args)
    except BadArtifact as err:
        return _fail(EXIT_BAD_ARTIFACT, BadArtifact.kind, str(err))
    except ImportError as err:
        return _fail(EXIT_RUNTIME_MISSING, "runtime_missing", f"the artifact's runtime is not installed here: {err}")
    except board_lock.BoardBusy as err:
        sys.stdout.write(json.dumps({"ok": False, "error": {
            "kind": "board_busy", "exit_code": board_lock.EXIT_BOARD_BUSY, "holder": err.holder,
            "waited_s": round(err.waited_s, 1), "message": f"{err} (waited {err.waited_s:.0f} s)"}}) + "\n")
        return board_lock.EXIT_BOARD_BUSY
    if args.samples_out:
        with open(args.samples_out + ".tmp", "w") as f:
            f.write("\n".join(f"{x:.6f}" for x in result["samples_ms"]) + "\n")
        os.replace(args.samples_out + ".tmp", args.samples_out)
    sys.stdout.write(json.dumps({"ok": True, **result}) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
