"""onnx2tf in a subprocess: ONNX -> TensorFlow SavedModel -> float ``.tflite`` (FP32 or FP16 weights).

TensorFlow is imported only in that subprocess (``python -c DRIVER``), which runs onnx2tf's own CLI
(``onnx2tf.main`` with its argv) and then converts the SavedModel onnx2tf wrote (``-osd``: with the
``serving_default`` signature) to ``.tflite`` with ``TFLiteConverter.from_saved_model``, so that the
model keeps the signature (onnx2tf's own float files have none). INT8 is made from that float file by
``ai-edge-quantizer`` (``converters/backends/tflite/quantizer.py``), not by onnx2tf's ``-oiqt``.

Traps handled here (see /work/shared/pitfalls.md): onnx2tf overwrites its input (it gets a copy in its
own work dir, with the rewrites of :func:`prepare_onnx`); it downloads a sample calibration file (even
for a float conversion, on some models) unless one named ``calibration_image_sample_data_20x128x128x3_float32.npy``
is in its working directory; on a conversion error it would try for minutes
to "auto-generate" a parameter-replacement JSON unless one is given (``-prf`` with no operations); a
crash is named with its signal (:func:`failure`). Its output goes to a log file, never to our stdout.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from contextlib import nullcontext, suppress
from pathlib import Path

import numpy as np

from edgeopt.converters.backends.tflite.layernorm import flatten_layernorm_params
from edgeopt.converters.backends.tflite.names import scope_safe_node_names
from edgeopt.enums import StrEnum
from edgeopt.errors import StageError, UnsupportedOpError

LOG_HINT = "see onnx2tf.log"  # replaced by where the log was kept (the backend keeps it beside the output)

MODEL_FILE = "model.tflite"  # the artifact's model file


class IODtype(StrEnum):
    """An INT8 model's input/output type: int8, or float32 with the (de)quantization inside."""

    FLOAT32 = "float32"
    INT8 = "int8"


ONNX2TF_PIN = "1.28.8"
SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
OUT_DIR = "saved_model"
# ONNX ops TFLite has no builtin for, that onnx2tf writes as builtins on request (-rtpo): Erf (a transformer's
# exact GELU) would otherwise be the Select-TF op tf.Erf, which LiteRT's builtin runtime can't run; onnx2tf's
# pseudo Erf is Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7) in abs/exp/mul/add/div, checked against ONNX after
PSEUDO_OPS = ("Erf",)

# Runs in the subprocess. argv: tflite_out fp16 (0/1) then onnx2tf's own arguments.
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
    """The one-line error for a failed onnx2tf run, read from its log (UnsupportedOpError when an op is named).
    A crash (killed by a signal) is named as such: the log's last lines are then whatever onnx2tf printed
    before it died (its ImageNet mean/std defaults, say), not a cause. Its hint is :data:`LOG_HINT`."""
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return StageError(f"tflite: onnx2tf crashed ({sig}, exit {rc}) while converting the model to TensorFlow",
                          f"use another --backend, or --precision fp16; {LOG_HINT}")
    text = _tail(log_path)
    m = _NOT_IMPLEMENTED.search(text)
    if m:
        return UnsupportedOpError(f"tflite: onnx2tf cannot convert the ONNX op '{m.group(1)}' (not implemented in "
                                  f"onnx2tf {ONNX2TF_PIN})", f"use another --backend; {LOG_HINT}")
    errors = [ln.strip() for ln in text.splitlines() if re.match(r"\s*[\w.]*(Error|Exception):", ln)]
    node = _OP_FAILED.search(text)
    if node:
        name = node.group(1).strip()
        found = _OP_TYPE.search(text)
        op = onnx_types.get(name) or (found.group(1) if found else None)
        why = errors[-1][:160] if errors else "conversion error"
        where = f"op '{op}' (node '{name[:80]}')" if op else f"node '{name[:80]}'"
        return UnsupportedOpError(f"tflite: onnx2tf failed on {where}: {why}",
                                  f"use another --backend, or fix the input layout; {LOG_HINT}")
    if rc == 0:
        return StageError("tflite: onnx2tf exited 0 but wrote no .tflite", LOG_HINT)
    why = errors[-1][:200] if errors else "no error named in its log"
    return StageError(f"tflite: onnx2tf failed (exit {rc}): {why}", LOG_HINT)


def pick_from_concat(model) -> int:
    """Replace ``Gather(Concat(x_0, …, x_n, axis=a), constant scalar i, axis=a)`` with ``Squeeze(x_i, a)``
    where every ``x`` is 1 wide along ``a`` (in place; returns the count). The same values, one op fewer.

    A torch-exported multi-layer LSTM picks ``h[-1]`` this way from the layers' stacked final states;
    onnx2tf 1.28.8 drops that Gather and the ``.tflite`` then outputs every layer's state (``[3, H]`` where
    ONNX says ``[1, H]``).
    """
    from onnx import helper, numpy_helper, shape_inference

    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no shapes, no rewrite
        return 0
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    producer = {o: n for n in model.graph.node for o in n.output}
    changed = 0
    for node in list(model.graph.node):
        if node.op_type != "Gather" or node.input[1] not in consts or consts[node.input[1]].ndim != 0:
            continue
        concat = producer.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if concat is None or concat.op_type != "Concat" or next(a.i for a in concat.attribute if a.name == "axis") != axis:
            continue
        shapes = [dims.get(x) for x in concat.input]
        if any(s is None or axis >= len(s) or s[axis] != 1 for s in shapes) or axis < 0:
            continue
        picked = concat.input[int(consts[node.input[1]])]
        axes = numpy_helper.from_array(np.array([axis], np.int64), f"{node.name or node.output[0]}__picked_axes")
        model.graph.initializer.append(axes)
        squeeze = helper.make_node("Squeeze", [picked, axes.name], list(node.output), name=f"{node.name}__picked")
        at = list(model.graph.node).index(node)
        model.graph.node.remove(node)
        model.graph.node.insert(at, squeeze)
        changed += 1
    return changed


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


def prepare_onnx(onnx_path: Path, dest: Path) -> dict:
    """Copy the model to ``dest`` for onnx2tf (it overwrites its input), with the graph rewrites it needs;
    returns how many of each were made."""
    import shutil

    import onnx

    proto = onnx.load(str(onnx_path))
    made = {"slice_axes_sorted": sort_slice_axes(proto), "gather_of_concat": pick_from_concat(proto)}
    made["layernorm_params_flattened"] = flatten_layernorm_params(proto)
    made["node_names_made_scope_safe"] = scope_safe_node_names(proto)
    if any(made.values()):
        onnx.save(proto, str(dest))
    else:
        shutil.copyfile(onnx_path, dest)
    return {**made, "pseudo_ops": sorted({n.op_type for n in proto.graph.node} & set(PSEUDO_OPS))}


def run_onnx2tf(onnx_path: Path, work_dir: Path, log_path: Path, *, tflite_out: Path, fp16: bool = False,
                keep_channel_last: tuple[str, ...] = (), progress=None, timeout_s: float = 3600.0) -> Path:
    """Run onnx2tf on a prepared copy of ``onnx_path`` in ``work_dir`` and write the float ``tflite_out``
    (FP32, or FP16 weights with ``fp16``); returns the SavedModel folder. A failure raises the error
    :func:`failure` reads from the log, whose hint points at ``log_path`` (:data:`LOG_HINT`)."""
    import onnx

    work_dir.mkdir(parents=True, exist_ok=True)
    model = work_dir / "model.onnx"
    made = prepare_onnx(onnx_path, model)
    np.save(work_dir / SAMPLE_FILE, np.zeros((1, 8, 8, 3), np.float32))  # else onnx2tf downloads one, even for float
    (work_dir / "no_replacement.json").write_text('{"format_version": 1, "operations": []}')
    args = ["-i", model.name, "-o", OUT_DIR, "-osd", "-nuo", "-prf", "no_replacement.json", "-v", "info"]
    if made["pseudo_ops"]:  # ops TFLite has no builtin for, written as builtins by onnx2tf (-rtpo)
        args += ["-rtpo", *made["pseudo_ops"]]
    for name in keep_channel_last:
        args += ["-kt", name]
    argv = [sys.executable, "-c", DRIVER, str(tflite_out.resolve()), "1" if fp16 else "0", *args]
    (work_dir / "tmp").mkdir(exist_ok=True)  # TensorFlow's autograph files go there, removed with the work dir
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1",
           "NO_COLOR": "1", "TMPDIR": str((work_dir / "tmp").resolve())}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    bar = progress("onnx2tf: " + ("FP16" if fp16 else "FP32"), None) if progress else nullcontext()
    with open(log_path, "ab") as log, bar as tick:
        log.write(f"$ python -m onnx2tf {' '.join(args)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, cwd=work_dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
        _wait(proc, timeout_s, tick)
    if proc.returncode != 0 or not tflite_out.is_file():
        types = {n.name: n.op_type for n in onnx.load(str(onnx_path), load_external_data=False).graph.node}
        with suppress(Exception):  # the prepared copy's node names are the ones onnx2tf's log gives
            types.update({n.name: n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node})
        raise failure(log_path, proc.returncode, types)
    return work_dir / OUT_DIR


def _wait(proc: subprocess.Popen, timeout_s: float, tick) -> None:
    t0 = time.monotonic()
    try:
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                proc.kill()
                proc.wait()
                raise StageError(f"tflite: onnx2tf ran longer than {timeout_s:.0f} s", LOG_HINT)
            time.sleep(0.5)
            if tick is not None:
                tick.advance(0)
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise


