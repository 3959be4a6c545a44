"""``convert --backend auto`` on the host profile, as a user runs it: which backend it writes and each backend's
figures. The LSTM speaker encoder (resemblyzer) with the user's own metric
(``--metric speaker_metric:verification``, 100 - EER, ``bench/speaker_metric.py``), and the digits CNN.

    .venv/bin/python bench/backend_auto.py [--models lstm,cnn] [--threads 1] [--out FILE]

Prints one JSON object: per model the command, its exit code and seconds, the manifest's ``backend_search``
(every backend: precision, metric drop, 8-bit/float units, p50 vs ONNX Runtime FP32 timed in blocks in the run,
chosen or dropped and why), and the environment (load included: the timings are the run's quick estimates).
Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import device_matrix  # noqa: E402
import quant_modes  # noqa: E402


def case(name: str, work: Path) -> tuple[Path, dict, list[str]]:
    if name == "lstm":
        return (quant_modes.speaker_encoder(work), quant_modes.speaker_data(work),
                ["--metric", "speaker_metric:verification", "--max-accuracy-drop", "1"])
    return HERE.parent / "fixtures" / "models" / "digits_cnn.onnx", quant_modes.digits_data(work), [
        "--max-accuracy-drop", "1"]


def run(name: str, threads: int, work: Path) -> dict:
    model, files, extra = case(name, work)
    out = work / f"{name}-auto"
    argv = [sys.executable, "-m", "edgeopt", "convert", str(model), "--profile", "host", "--backend", "auto",
            "--precision", "int8", "--calib", str(files["calib"]), "--eval", str(files["eval"]), *extra,
            "--threads", str(threads), "--json", "-o", str(out)]
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, cwd=HERE)  # --metric's module is in bench/
    row = {"model": name, "command": " ".join(["edgeopt", *argv[3:]]), "exit_code": r.returncode,
           "seconds": round(time.time() - t0, 1)}
    if r.returncode == 0:
        m = json.loads((out / "manifest.json").read_text())
        row.update(backend=m["backend"], precision=m["precision"], backend_search=m["backend_search"])
    else:
        row["stderr_tail"] = r.stderr.strip().splitlines()[-3:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lstm,cnn")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgeopt-backend-auto-") as tmp:
        rows = [run(name, a.threads, Path(tmp)) for name in a.models.split(",")]
    result = {"bench": "backend_auto", "threads": a.threads, **device_matrix.environment(), "runs": rows}
    text = json.dumps(result, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
