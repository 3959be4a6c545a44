"""What two runs on one board at once do to the figures, and what the board lock gives back.

One model (SqueezeNet's architecture from the onnx package's test data, constant weights: ~0.7 GFLOP a
call, so the timing means something; ONNX Runtime FP32 on 2 threads, every core of this VM) on one loopback board (an emulated x86
device: a real sshd on 127.0.0.1 running this machine's python, started here in a throwaway config
dir and stopped at the end), measured by ``remote_bench`` three ways, round after round:

* alone: one run;
* overlapping, no lock: two runs started together with ``EDGEOPT_NO_BOARD_LOCK=1`` (the error users
  had before the lock: both timings taken while the other run competes for the same cores);
* overlapping, locked: two runs started together with the board lock (the second waits).

Prints one JSON object: each way's p50s (ms) per run, their median, and the ratio to alone, with
the machine's facts. ``EDGEOPT_NO_BOARD_LOCK`` exists for this script only; such results say
``exclusive: false``. The board is this machine (a shared VM): the figures show the effect, not a
real board's speed.

    .venv/bin/python bench/board_contention.py [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def default_model() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"


def _runs(device, artifact, n: int, seconds: float, locked: bool, threads: int) -> list[dict]:
    from edgeopt.remote.bench import remote_bench
    from edgeopt.remote.board_lock import NO_LOCK_ENV

    out: list[dict | None] = [None] * n
    errors: list[BaseException] = []
    if not locked:
        os.environ[NO_LOCK_ENV] = "1"
    try:
        def one(i: int) -> None:
            try:
                out[i] = remote_bench(device, artifact, store=False, warmup=20, min_runs=50, min_seconds=seconds,
                                      threads=threads)
            except BaseException as err:  # noqa: BLE001 - reported after the join
                errors.append(err)

        workers = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        os.environ.pop(NO_LOCK_ENV, None)
    if errors:
        raise errors[0]
    return out  # type: ignore[return-value]


def _summary(runs: list[list[dict]], alone: float | None) -> dict:
    p50s = [r["latency_ms"]["p50"] for rnd in runs for r in rnd]
    med = statistics.median(p50s)
    windows = [[tuple(r["environment"]["measured_unix"]) for r in rnd] for rnd in runs]
    overlapped = sum(1 for w in windows if len(w) == 2 and max(a for a, _ in w) < min(b for _, b in w))
    return {"p50_ms": [round(x, 4) for x in p50s], "median_p50_ms": round(med, 4),
            "vs_alone": round(med / alone, 3) if alone else None,
            "exclusive": sorted({r.get("exclusive") for rnd in runs for r in rnd}, key=str),
            "rounds_whose_two_measurements_overlapped": overlapped if len(runs[0]) == 2 else None,
            "lock_wait_s": [r.get("board_lock", {}).get("wait_seconds") for rnd in runs for r in rnd],
            # what else ran on the board meanwhile (the other run, when unlocked, and this shared VM's load)
            "others_cpu_pct": [(r["environment"].get("interference") or {}).get("other_busy_pct")
                               for rnd in runs for r in rnd],
            "overlap_share_of_measurement": [round(_overlap(rnd), 2) for rnd in runs] if len(runs[0]) == 2 else None}


def _overlap(rnd: list[dict]) -> float:
    """How much of the two measurement windows (load, warm-up, timed runs) coincided, as a share of the shorter."""
    (a0, a1), (b0, b1) = (r["environment"]["measured_unix"] for r in rnd)
    return max(0.0, min(a1, b1) - max(a0, b0)) / max(1e-9, min(a1 - a0, b1 - b0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="least timed seconds of each run")
    ap.add_argument("--threads", type=int, default=2, help="runtime threads of each run (default: 2, every core here)")
    ap.add_argument("--model", type=Path, default=None, help="an .onnx model (default: light_squeezenet)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgeopt-contention-") as tmp:
        for key, sub in (("EDGEOPT_CONFIG_DIR", "config"), ("EDGEOPT_DATA_DIR", "data")):
            os.environ[key] = str(Path(tmp) / sub)
        from edgeopt.convert import convert
        from edgeopt.remote.emulate import start_emulator, stop_emulator
        from edgeopt.remote.inventory import get_device

        artifact = Path(tmp) / "artifact"
        model = args.model or default_model()
        convert(str(model), "host", str(artifact), backend="onnxruntime", precision="fp32")
        start_emulator("host", "contention-emu")
        try:
            dev = get_device("contention-emu")
            ways: dict[str, list[list[dict]]] = {"alone": [], "overlapping_no_lock": [], "overlapping_locked": []}
            for _ in range(args.rounds):  # interleaved, so a slow spell of the VM hits every way alike
                for way, n, locked in (("alone", 1, True), ("overlapping_no_lock", 2, False),
                                       ("overlapping_locked", 2, True)):
                    ways[way].append(_runs(dev, artifact, n, args.seconds, locked, args.threads))
        finally:
            stop_emulator("contention-emu")
    alone = _summary(ways["alone"], None)
    env = ways["alone"][0][0]["environment"]
    print(json.dumps({
        "model": model.name, "backend": "onnxruntime fp32",
        "board": "emulated x86 device on loopback (this machine's CPU: the effect, not a board's speed)",
        "rounds": args.rounds, "min_seconds_per_run": args.seconds,
        "threads": args.threads,
        "alone": alone,
        "overlapping_no_lock": _summary(ways["overlapping_no_lock"], alone["median_p50_ms"]),
        "overlapping_locked": _summary(ways["overlapping_locked"], alone["median_p50_ms"]),
        "machine": {"cpu": env.get("cpu"), "cores": os.cpu_count(), "python": platform.python_version(),
                    "load_before_first_run": env.get("load_before")},
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
