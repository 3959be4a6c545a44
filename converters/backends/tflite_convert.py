"""onnx2tf in a subprocess: ONNX -> TensorFlow SavedModel -> ``.tflite`` (FP32, FP16 or full-integer INT8).

TensorFlow is imported only in that subprocess (``python -c DRIVER``), which runs onnx2tf's own CLI
(``onnx2tf.main`` with its argv) and then, for float models, converts the SavedModel onnx2tf wrote
(``-osd``: with the ``serving_default`` signature) to ``.tflite`` with ``TFLiteConverter.from_saved_model``
so that the float model keeps the signature too (onnx2tf's own float files have none). INT8 is
onnx2tf's ``-oiqt`` with the user's calibration data (``-cind NAME FILE [0.0] [1.0]``: mean 0 / std 1,
so the data passes through unchanged), read from its signature-carrying ``*_integer_quant.tflite``
(float I/O) or ``*_full_integer_quant.tflite`` (int8 I/O).

Traps handled here (see /work/shared/pitfalls.md): onnx2tf overwrites its input (it gets a copy in its
own work dir); with ``-oiqt`` it would download a sample calibration file unless one named
``calibration_image_sample_data_20x128x128x3_float32.npy`` is in its working directory; on a conversion
error it would try for minutes to "auto-generate" a parameter-replacement JSON unless one is given
(``-prf`` with no operations). Its output goes to a log file, never to our stdout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from edgeopt.enums import StrEnum
from edgeopt.errors import StageError, UnsupportedOpError

MODEL_FILE = "model.tflite"  # the artifact's model file


class IODtype(StrEnum):
    """An INT8 model's input/output type: int8, or float32 with the (de)quantization inside."""

    FLOAT32 = "float32"
    INT8 = "int8"

ONNX2TF_PIN = "1.28.8"
SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
OUT_DIR = "saved_model"

# Runs in the subprocess. argv: tflite_out ("" for INT8) fp16 (0/1) then onnx2tf's own arguments.
DRIVER = r"""
import sys
out, fp16, args = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
import onnx2tf
sys.argv = ["onnx2tf", *args]
try:
    onnx2tf.main()
except SystemExit as e:
    if e.code not in (0, None):
        raise
if out:
    import tensorflow as tf
    print("edgeopt: SavedModel -> TFLite (from_saved_model, signature serving_default)", flush=True)
    conv = tf.lite.TFLiteConverter.from_saved_model(args[args.index("-o") + 1], signature_keys=["serving_default"])
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if fp16:
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.target_spec.supported_types = [tf.float16]
    with open(out + ".tmp", "wb") as f:
        f.write(conv.convert())
    import os
    os.replace(out + ".tmp", out)
print("edgeopt: conversion done", flush=True)
"""

_NOT_IMPLEMENTED = re.compile(r"(\S+) OP is not yet implemented")
_OP_FAILED = re.compile(r"onnx_op_name:\s*(.+)")
_OP_TYPE = re.compile(r"onnx_op_type:\s*(\S+)")
_FLEX = re.compile(r"(?:Select TF ops|Flex ops?)[^\n]*?:\s*([^\n]+)", re.I)
_CUSTOM = re.compile(r"(?:custom op|Encountered unresolved custom op)[^\n]*?:?\s*([A-Za-z0-9_]+)", re.I)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def tf_name(onnx_name: str) -> str:
    """The name onnx2tf gives an ONNX tensor in TensorFlow (colons are not allowed there)."""
    return re.sub(r"^/", "wa/", onnx_name.replace(":", "_"))


def channel_last_perm(rank: int) -> list[int]:
    """ONNX channel-first -> channel-last, e.g. [0, 2, 3, 1] for rank 4."""
    return [0, *range(2, rank), 1]


def looks_channel_last(shape) -> bool:
    """A rank>=3 input whose last dim is small (1/3/4) and second is not: already NWC/NHWC (e.g. from tf2onnx)."""
    dims = list(shape)
    return len(dims) >= 3 and isinstance(dims[-1], int) and dims[-1] in (1, 2, 3, 4) and \
        isinstance(dims[1], int) and dims[1] > 4


def _tail(log_path: Path, n: int = 400_000) -> str:
    try:
        data = log_path.read_bytes()[-n:]
    except OSError:
        return ""
    return _ANSI.sub("", data.decode("utf-8", "replace"))


def failure(log_path: Path, rc: int, onnx_types: dict[str, str]) -> Exception:
    """The one-line error for a failed onnx2tf run, read from its log (UnsupportedOpError when an op is named)."""
    text = _tail(log_path)
    m = _NOT_IMPLEMENTED.search(text)
    hint_log = f"onnx2tf's log: {log_path}"
    if m:
        return UnsupportedOpError(f"tflite: onnx2tf cannot convert the ONNX op '{m.group(1)}' (not implemented in "
                                  f"onnx2tf {ONNX2TF_PIN})", f"use another --backend; {hint_log}")
    node = _OP_FAILED.search(text)
    if node:
        name = node.group(1).strip()
        op = onnx_types.get(name) or (_OP_TYPE.search(text).group(1) if _OP_TYPE.search(text) else "?")
        lines = [ln.strip() for ln in text.splitlines() if re.match(r"\s*\w*Error:", ln)]
        why = lines[-1][:160] if lines else "conversion error"
        return UnsupportedOpError(f"tflite: onnx2tf failed on op '{op}' (node '{name[:80]}'): {why}",
                                  f"use another --backend, or fix the input layout; {hint_log}")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "I0000" not in ln]
    last = next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else f"exit status {rc}")
    return StageError(f"tflite: onnx2tf failed (exit {rc}): {last[:200]}", hint_log)


def sort_slice_axes(model) -> int:
    """Reorder constant Slice parameters so that ``axes`` is ascending (in place; returns the count).

    onnx2tf 1.28.8 maps starts/ends to dimensions as if ``axes`` were sorted: a Slice with axes
    ``[0, 2, 1, 3]`` (as tf2onnx writes them) silently becomes a no-op. The reordered Slice is the same op.
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    changed = 0
    for node in model.graph.node:
        if node.op_type != "Slice" or len(node.input) < 4 or not all(n in inits for n in node.input[1:] if n):
            continue
        axes = numpy_helper.to_array(inits[node.input[3]])
        if axes.ndim != 1 or np.all(np.diff(axes) > 0) or np.any(axes < 0):
            continue
        order = np.argsort(axes, kind="stable")
        for k in range(1, len(node.input)):
            name = node.input[k]
            if not name:
                continue
            arr = numpy_helper.to_array(inits[name])[order]
            new = f"{name}__sorted_{node.name or changed}"
            model.graph.initializer.append(numpy_helper.from_array(arr, new))
            inits[new] = model.graph.initializer[-1]
            node.input[k] = new
        changed += 1
    return changed


def run_onnx2tf(onnx_path: Path, work_dir: Path, log_path: Path, *, tflite_out: Path | None = None,
                fp16: bool = False, calib: dict[str, np.ndarray] | None = None, int8_io: bool = False,
                per_channel: bool = True, keep_channel_last: tuple[str, ...] = (), progress=None,
                timeout_s: float = 3600.0) -> Path:
    """Run onnx2tf on a copy of ``onnx_path`` in ``work_dir``; returns the SavedModel folder.

    Float (``calib`` None): also writes ``tflite_out`` (FP32, or FP16 weights with ``fp16``).
    INT8 (``calib``: NHWC float32 arrays by ONNX input name): onnx2tf's ``-oiqt`` files in the folder.
    """
    import shutil

    import onnx

    work_dir.mkdir(parents=True, exist_ok=True)
    model = work_dir / "model.onnx"
    proto = onnx.load(str(onnx_path))
    if sort_slice_axes(proto):
        onnx.save(proto, str(model))
    else:
        shutil.copyfile(onnx_path, model)  # onnx2tf overwrites its input: it gets a copy
    del proto
    np.save(work_dir / SAMPLE_FILE, np.zeros((1, 8, 8, 3), np.float32))  # never downloaded: calib is ours
    (work_dir / "no_replacement.json").write_text('{"format_version": 1, "operations": []}')
    args = ["-i", model.name, "-o", OUT_DIR, "-osd", "-nuo", "-prf", "no_replacement.json", "-v", "info"]
    for name in keep_channel_last:
        args += ["-kt", name]
    if calib is not None:
        io = "int8" if int8_io else "float32"
        args += ["-oiqt", "-qt", "per-channel" if per_channel else "per-tensor", "-iqd", io, "-oqd", io]
        for i, (name, arr) in enumerate(calib.items()):
            f = work_dir / f"calib_{i}.npy"
            np.save(f, np.ascontiguousarray(arr, np.float32))
            args += ["-cind", tf_name(name), f.name, "[0.0]", "[1.0]"]
    argv = [sys.executable, "-c", DRIVER, str(tflite_out.resolve()) if tflite_out else "", "1" if fp16 else "0", *args]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1",
           "NO_COLOR": "1"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    what = "onnx2tf: " + ("INT8 (calibrating)" if calib is not None else "FP16" if fp16 else "FP32")
    bar = progress(what, None) if progress else nullcontext()
    with open(log_path, "ab") as log, bar as tick:
        log.write(f"$ python -m onnx2tf {' '.join(args)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, cwd=work_dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
        t0 = time.monotonic()
        try:
            while proc.poll() is None:
                if time.monotonic() - t0 > timeout_s:
                    proc.kill()
                    proc.wait()
                    raise StageError(f"tflite: onnx2tf ran longer than {timeout_s:.0f} s", f"see {log_path}")
                time.sleep(0.5)
                if tick is not None:
                    tick.advance(0)
        except BaseException:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
    if proc.returncode != 0 or (tflite_out is not None and not tflite_out.is_file()):
        types = {n.name: n.op_type for n in onnx.load(str(onnx_path), load_external_data=False).graph.node}
        import tempfile

        # the artifact's temporary dir is removed on failure: keep the log where the error message can point
        kept = Path(tempfile.gettempdir()) / f"edgeopt-onnx2tf-{os.getpid()}-{int(time.time())}.log"
        shutil.copyfile(log_path, kept)
        raise failure(kept, proc.returncode, types)
    return work_dir / OUT_DIR


def int8_file(folder: Path, int8_io: bool) -> Path:
    """onnx2tf's INT8 file: full-integer with int8 I/O, or integer-quantized with float I/O."""
    suffix = "_full_integer_quant.tflite" if int8_io else "_integer_quant.tflite"
    found = sorted(folder.glob(f"*{suffix}"))
    if not found:
        raise StageError(f"tflite: onnx2tf wrote no '*{suffix}' file", "see the onnx2tf log in the artifact")
    return found[0]
