"""Running a ``.tflite`` in TensorFlow Lite for Microcontrollers' reference interpreter, here on x86.

``tflite-micro`` (PyPI, the ``micro`` extra) wraps TFLM's interpreter, its reference kernels and its
RecordingMicroAllocator. :func:`find_arena` bisects ``arena_size`` to the smallest arena that allocates and
invokes, to within :data:`ARENA_RESOLUTION` bytes; :func:`allocations` reads the allocator's breakdown.
The arena is measured with 64-bit pointers: TFLM's structs are smaller on a 32-bit core, so a board needs
no more than this (TFLM's own arena size advice: measure on the host, add a margin for the board's kernels).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import tempfile

import numpy as np

from edgeopt.errors import StageError

ARENA_RESOLUTION = 64  # bytes: bisection stops when the bracket is this narrow
ARENA_MARGIN = 0.0  # share added to the smallest arena found for EDGEOPT_ARENA_BYTES (stated in the header)


def _runtime():
    from edgeopt.deps import require

    require("tflite_micro", "running a model in TensorFlow Lite for Microcontrollers")
    from tflite_micro.python.tflite_micro import runtime

    return runtime


def open_tflm(path, arena_size: int):
    """A TFLM interpreter for ``path`` with an arena of ``arena_size`` bytes (RuntimeError when it can't allocate)."""
    with _quiet_fd(2):
        return _runtime().Interpreter.from_file(str(path), arena_size=int(arena_size))


@contextlib.contextmanager
def _quiet_fd(fd: int, sink: list[str] | None = None):
    """File descriptor ``fd`` (TFLM's C++ prints) into a temp file; its text appended to ``sink``."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(fd)
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            ctypes.CDLL(None).fflush(None)  # C stdio buffers, before the descriptor goes back
            os.dup2(saved, fd)
            os.close(saved)
            if sink is not None:
                tmp.seek(0)
                sink.append(tmp.read().decode(errors="replace"))


def _quantize(x: np.ndarray, detail: dict) -> np.ndarray:
    dtype = np.dtype(detail["dtype"])
    q = detail.get("quantization_parameters") or {}
    scales = q.get("scales")
    if dtype.kind == "f" or scales is None or len(scales) == 0:
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scales[0] + q["zero_points"][0]), info.min, info.max).astype(dtype)


def _dequantize(y: np.ndarray, detail: dict) -> np.ndarray:
    q = detail.get("quantization_parameters") or {}
    scales = q.get("scales")
    if np.dtype(detail["dtype"]).kind == "f" or scales is None or len(scales) == 0:
        return y.astype(np.float32)
    return ((y.astype(np.float32) - q["zero_points"][0]) * scales[0]).astype(np.float32)


def details(get) -> list[dict]:
    """Every input's (or output's) details from ``get`` (``interp.get_input_details``): TFLM has no count, so
    indices are tried until one is out of range (its complaint on stderr kept quiet)."""
    out: list[dict] = []
    with _quiet_fd(2):
        while True:
            try:
                out.append(get(len(out)))
            except (IndexError, RuntimeError, ValueError):
                return out


def run_tflm(interp, inputs: list[np.ndarray], outputs: list[dict] | None = None) -> list[np.ndarray]:
    """One inference: float inputs in the model's (runtime) layout, quantized where the model's inputs are
    integer; float outputs, dequantized likewise (``outputs``: the output details, read once by the caller)."""
    for i, x in enumerate(inputs):
        interp.set_input(_quantize(np.asarray(x), interp.get_input_details(i)), i)
    interp.invoke()
    outputs = outputs if outputs is not None else details(interp.get_output_details)
    return [_dequantize(np.asarray(interp.get_output(i)).copy(), d) for i, d in enumerate(outputs)]


def _works(path, arena: int, inputs: list[np.ndarray]) -> bool:
    try:
        interp = open_tflm(path, arena)
        with _quiet_fd(2):
            run_tflm(interp, inputs)
        return True
    except (RuntimeError, ValueError):
        return False


def find_arena(path, inputs: list[np.ndarray], *, upper: int | None = None) -> dict:
    """The smallest arena (bytes) in which the model allocates and runs ``inputs``, bisected to within
    :data:`ARENA_RESOLUTION`; exit 3 when even ``upper`` (default 64 x the model's size, at least 1 MB) fails."""
    size = os.path.getsize(path)
    hi = upper or max(64 * size, 1 << 20)
    if not _works(path, hi, inputs):
        raise StageError(f"tflite-micro: the model does not run even with a {hi} byte arena",
                         "check the model's ops with TFLM (edgeopt.converters.backends.tflite.micro.ops) or give a larger arena")
    lo, tries = 0, 1
    while hi - lo > ARENA_RESOLUTION:
        mid = (lo + hi) // 2
        tries += 1
        if _works(path, mid, inputs):
            hi = mid
        else:
            lo = mid
    found = (hi + 15) // 16 * 16
    return {"arena_bytes": found, "resolution_bytes": ARENA_RESOLUTION, "tries": tries,
            "allocations": allocations(path, found)}


_ALLOC = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")


def allocations(path, arena: int) -> dict:
    """TFLM's RecordingMicroAllocator breakdown for ``arena``: total/head (the activation plan)/tail
    (persistent: tensor and node structs, kernels' buffers), in bytes. In a child process: TFLM prints it
    through its own C stdio, which this process can't capture."""
    import subprocess
    import sys

    code = ("import sys; from tflite_micro.python.tflite_micro import runtime; "
            "runtime.Interpreter.from_file(sys.argv[1], arena_size=int(sys.argv[2])).print_allocations()")
    done = subprocess.run([sys.executable, "-c", code, str(path), str(arena)], capture_output=True, text=True,
                          timeout=120, check=False)
    return {f"{k}_bytes": int(v) for k, v in _ALLOC.findall(done.stdout + done.stderr)}
