"""TFLite Micro's op set asked of the ONNX model, before the conversion: each ONNX op whose TFLite form (as
onnx2tf lowers it) TFLM lacks is named with that TFLite op and its alternative.

:data:`ONNX_TO_TFLITE` is read from onnx2tf 1.28.8's own op modules (``onnx2tf/ops/<Op>.py``: the TensorFlow
call each one makes, always, whatever the attributes) and TensorFlow Lite's converter, which writes that call as
the builtin named here. Ops onnx2tf lowers only sometimes to something TFLM lacks (``Pow`` with a non-integer
exponent, ``Erf``) are not listed: for them, and for anything else, the check of the written ``.tflite``
(:func:`edgeopt.converters.backends.tflite.micro.ops.check_tflm_ops`) stays the final word.
"""

from __future__ import annotations

from edgeopt.converters.backends.tflite.micro.ops import TFLM_OPS, alternative
from edgeopt.errors import UnsupportedOpError

# ONNX op -> the TFLite builtin onnx2tf's converter for it produces (the TF call in onnx2tf/ops/<Op>.py).
ONNX_TO_TFLITE: dict[str, str] = {
    "TopK": "TOPK_V2",  # tf.math.top_k
    "Range": "RANGE",  # tf.range
    "Tile": "TILE",  # tf.tile
    "OneHot": "ONE_HOT",  # tf.one_hot
    "ReduceProd": "REDUCE_PROD",  # tf.math.reduce_prod
    "NonZero": "WHERE",  # tf.where(condition) with one argument
    "Sign": "SIGN",  # tf.math.sign
    "LRN": "LOCAL_RESPONSE_NORMALIZATION",  # tf.nn.lrn
    "RandomUniform": "RANDOM_UNIFORM",  # tf.random.uniform
    "ReverseSequence": "REVERSE_SEQUENCE",  # tf.reverse_sequence
    "Unique": "UNIQUE",  # tf.unique
    "Gelu": "GELU",  # tf.nn.gelu
}

def _op_types(model) -> list[str]:
    from edgeopt.analyze.preflight import op_types

    return op_types(model)


def onnx_ops_tflm_lacks(model) -> list[dict]:
    """[{onnx_op, tflite_op, alternative}] for each ONNX op type of ``model`` (a ``ModelProto``) whose TFLite form
    TFLM cannot run, by op type name."""
    out = []
    for op in _op_types(model):
        tfl = ONNX_TO_TFLITE.get(op)
        if tfl is not None and tfl not in TFLM_OPS:
            out.append({"onnx_op": op, "tflite_op": tfl, "alternative": alternative(tfl)})
    return out


def check_onnx_for_tflm(model, profile_name: str = "") -> None:
    """Exit 3 (before any conversion) when ``model`` (path or ``ModelProto``) holds an op that becomes a TFLite op
    TFLM lacks: the first one named, with its TFLite form and the alternative."""
    import os

    from edgeopt.model import load_onnx

    proto = load_onnx(model) if isinstance(model, (str, os.PathLike)) else model
    missing = onnx_ops_tflm_lacks(proto)
    if not missing:
        return
    first = missing[0]
    where = f" for {profile_name}" if profile_name else ""
    more = f" (and {', '.join(m['onnx_op'] for m in missing[1:])})" if len(missing) > 1 else ""
    raise UnsupportedOpError(
        f"tflite-micro: ONNX op '{first['onnx_op']}'{more} becomes TFLite {first['tflite_op']} (onnx2tf), which "
        f"TensorFlow Lite for Microcontrollers cannot run{where}; nothing was converted",
        f"use {first['alternative']}", details={"unsupported_ops": missing})
