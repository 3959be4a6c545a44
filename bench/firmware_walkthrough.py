"""The firmware walk-through of docs/guide/firmware-microcontrollers.md, run once: the digits CNN analyzed for
the stm32h7 profile, converted to INT8 TFLite checked in TFLite Micro and compiled as a C array for the
Cortex-M7, with float and with int8 inputs and outputs. Every figure the guide shows comes from the one JSON
this writes (bench/results/<date>/firmware_walkthrough.json), rendered into the guide by bench/docs_tables.py.

    .venv/bin/python bench/firmware_walkthrough.py

The commands run as the guide writes them (:data:`COMMANDS`), in a scratch directory holding a link to the
repository's ``fixtures/``; the JSON keeps each command, its exit code, the lines it printed, the arena, TFLM's
allocations, the firmware sizes, the compiler and the generated ``model_data.h``, and for the memory gate's two
commands (a budget the model does not fit: exit 5, nothing written; FP32 under a budget only INT8 fits: INT8
built) the gate's line and whether the output folder was written.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DIGITS_BUILD = ("edgeopt convert fixtures/models/digits_cnn.onnx --profile stm32h7 \\\n"
                "    --calib fixtures/data/digits_calib.npz --eval fixtures/data/digits_test.npz \\\n"
                "    --export-c")
# name -> (the command as the guide prints it, the output folder it writes or None, the exit code it should end with)
COMMANDS: dict[str, tuple[str, str | None, int]] = {
    "analyze": ("edgeopt analyze fixtures/models/digits_cnn.onnx --profile stm32h7 --plot digits.png", None, 0),
    "convert": (f"{DIGITS_BUILD} -o digits_m7", "digits_m7", 0),
    "convert_int8_io": (f"{DIGITS_BUILD} --set tflite.io_dtype=int8 -o digits_m7_int8", "digits_m7_int8", 0),
    # the memory gate: a budget the INT8 model does not fit refuses before any work (exit 5, nothing written) ...
    "refuse": (f"{DIGITS_BUILD} --memory-budget 6KB -o digits_m7_6kb", "digits_m7_6kb", 5),
    # ... and FP32 asked for under a budget only INT8 fits: the gate builds INT8 and says so
    "adapt": ("edgeopt convert fixtures/models/digits_cnn.onnx --profile stm32h7 --precision fp32 \\\n"
              "    --calib fixtures/data/digits_calib.npz --eval fixtures/data/digits_test.npz \\\n"
              "    --memory-budget 12KB -o digits_m7_12kb", "digits_m7_12kb", 0),
}
# The printed lines the guide shows, by their first word (the rest are the plan's stage list and the checks'
# details, which the guide elides).
SHOWN = ("plan", "wrote", "validation", "units", "metric", "memory", "tflite-micro:", "arena:", "firmware",
         "roofline")


def argv_of(command: str) -> list[str]:
    """The argv of a command as the guide prints it (``\\`` line continuations joined); ``edgeopt`` is the one
    installed beside this Python."""
    argv = shlex.split(command.replace("\\\n", " "))
    if argv[0] == "edgeopt":
        argv[0] = str(Path(sys.executable).with_name("edgeopt"))
    return argv


def run_command(command: str, cwd: Path, timeout_s: float = 900) -> dict:
    """Runs one command in ``cwd``: its exit code, seconds and printed lines."""
    t0 = time.monotonic()
    done = subprocess.run(argv_of(command), cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    lines = [ln.rstrip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    return {"command": command, "returncode": done.returncode, "seconds": round(time.monotonic() - t0, 1),
            "lines": lines}


def build_figures(out: Path) -> dict:
    """The figures of one converted artifact: TFLM's check and arena, the firmware sizes, the header."""
    manifest = json.loads((out / "manifest.json").read_text())
    micro = next(s for s in manifest["stages"] if s["name"] == "tflite")["report"]["micro"]
    predicted = manifest["memory"]["predicted"]
    return {"ops": micro["ops"], "arena": micro["arena"], "accuracy": micro["accuracy"],
            "c_export": micro["c_export"], "firmware": micro["firmware"],
            "predicted": {k: predicted[k] for k in ("arena_bytes", "runtime_bytes", "total_bytes", "flash_bytes")},
            "budget_bytes": manifest["memory"]["budget_bytes"],
            "header": (out / "model_data.h").read_text()}


def gate_figures(run: dict, out: Path) -> dict:
    """What the memory gate printed (its error or its warning line), and whether the output folder exists."""
    said = [ln for ln in run["lines"] if ln.startswith(("edgeopt: error: memory:", "warning: memory:"))]
    written = out.exists() or any(p.name.startswith(f".{out.name}") for p in out.parent.iterdir())
    figures = {"gate_line": said[0] if said else None, "written": written}
    if written and (out / "manifest.json").is_file():
        memory = json.loads((out / "manifest.json").read_text())["memory"]
        figures["adapted"], figures["precision"] = memory.get("adapted"), memory["predicted"]["precision"]
    return figures


def walk(work: Path) -> dict:
    """Every command of :data:`COMMANDS` in ``work`` (which gets a link to ``fixtures/``), and each build's
    figures (the gate's line for the two gate commands)."""
    (work / "fixtures").symlink_to(REPO / "fixtures")
    runs, builds = {}, {}
    for name, (command, out, expected) in COMMANDS.items():
        runs[name] = run_command(command, work)
        print(json.dumps({name: runs[name]["returncode"], "seconds": runs[name]["seconds"]}), file=sys.stderr)
        if runs[name]["returncode"] != expected:
            raise SystemExit(f"{name} exited {runs[name]['returncode']}, not {expected}:\n"
                             + "\n".join(runs[name]["lines"][-5:]))
        if name in ("refuse", "adapt"):
            runs[name].update(gate_figures(runs[name], work / out))
        elif out:
            builds[name] = build_figures(work / out)
    return {"commands": runs, "builds": builds}


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("ai-edge-litert", "ai-edge-quantizer", "onnx2tf", "tensorflow", "tflite-micro", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def main() -> None:
    from edgeopt.runtime.environment import cpu_info

    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="fw-walk-") as w:
        result = walk(Path(w))
    result.update(load_before=load_before, load_after=list(os.getloadavg()), versions=_versions(),
                  machine={"cpu": {**cpu_info(), "logical_cpus": os.cpu_count()}, "platform": platform.platform()},
                  python=platform.python_version(), date=datetime.date.today().isoformat(),
                  note="one run of the guide's commands; the arena is bisected in TFLM's x86-64 interpreter to "
                       "64 bytes; flash: arm-none-eabi-size of the Cortex-M7 image (model array + a minimal "
                       "harness, no TFLM)")
    path = REPO / "bench" / "results" / result["date"] / "firmware_walkthrough.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"wrote": str(path.relative_to(REPO)),
                      "arena_bytes": {k: b["arena"]["arena_bytes"] for k, b in result["builds"].items()},
                      "flash_bytes": {k: b["firmware"]["flash_bytes"] for k, b in result["builds"].items()}}))


if __name__ == "__main__":
    main()
