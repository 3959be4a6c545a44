"""Peak resident memory of a model, measured in a child process of its own.

The child records its resident set (``/proc/self/statm``, RSS) before the runtime is imported, then
the peak (``VmHWM`` in ``/proc/self/status``, the kernel's high-water mark of this process's RSS) after
load, after the first inference and after ``runs`` more. Not ``ru_maxrss``: Linux carries it across
``execve``, so a child would start with its parent's peak. What the model took is each peak minus the
RSS before import: the interpreter's own memory is not counted, the runtime's is. RSS counts pages
touched, so weights mapped but never read are not counted, and shared libraries are counted whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

METHOD = ("child process: VmHWM (peak RSS, /proc/self/status) after each phase minus RSS (/proc/self/statm) "
          "before the runtime was imported")

_CHILD = r"""
import json, os, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
import numpy as np
before = rss()
out = {"before_bytes": before}
artifact, runs, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, sys.argv[4])
from edgeopt.runtime.runners import open_runner
runner = open_runner(artifact, threads=int(threads) if threads != "none" else None)
out["load_bytes"] = peak() - before
with open(os.path.join(artifact, "manifest.json")) as f:
    manifest = json.load(f)
rng = np.random.default_rng(0)
feeds = {}
for t in manifest["inputs"]:
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in t["shape"]]
    dt = np.dtype("float32" if t["dtype"] == "float" else t["dtype"])
    feeds[t["name"]] = (rng.random(shape) if dt.kind == "f" else np.zeros(shape)).astype(dt)
runner.run(feeds)
out["first_inference_bytes"] = peak() - before
for _ in range(runs):
    runner.run(feeds)
out["steady_bytes"] = peak() - before
out["peak_bytes"] = out["steady_bytes"]
print("EDGEOPT_MEMORY " + json.dumps(out))
"""


def measure_peak(artifact_dir: str | Path, *, runs: int = 10, threads: int | None = None,
                 timeout_s: float = 600.0) -> dict:
    """The artifact's peak resident memory across load, first inference and ``runs`` steady runs (bytes), in a
    child process; ``{"error": ...}`` when the child fails."""
    import edgeopt

    root = str(Path(edgeopt.__file__).resolve().parent.parent)
    cmd = [sys.executable, "-c", _CHILD, str(artifact_dir), str(runs), str(threads or "none"), root]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s", "method": METHOD}
    line = next((x for x in done.stdout.splitlines() if x.startswith("EDGEOPT_MEMORY ")), None)
    if done.returncode != 0 or line is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"error": f"the measuring process failed: {last}", "method": METHOD}
    return {**json.loads(line.removeprefix("EDGEOPT_MEMORY ")), "method": METHOD}
