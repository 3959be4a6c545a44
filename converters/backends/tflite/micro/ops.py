"""TFLite Micro's op set, and the check of a ``.tflite`` against it (the op names LiteRT reports)."""

from __future__ import annotations

from edgeopt.errors import UnsupportedOpError

# Builtin ops TFLite Micro's MicroMutableOpResolver registers (tensorflow/tflite-micro,
# tensorflow/lite/micro/micro_mutable_op_resolver.h); anything else, custom ops included, does not run.
TFLM_OPS = frozenset("""
ABS ADD ADD_N ARG_MAX ARG_MIN ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL BATCH_TO_SPACE_ND BROADCAST_ARGS
BROADCAST_TO CALL_ONCE CAST CEIL CONCATENATION CONV_2D COS CUMSUM DEPTH_TO_SPACE DEPTHWISE_CONV_2D DEQUANTIZE DIV
ELU EMBEDDING_LOOKUP EQUAL EXP EXPAND_DIMS FILL FLOOR FLOOR_DIV FLOOR_MOD FULLY_CONNECTED GATHER GATHER_ND GREATER
GREATER_EQUAL HARD_SWISH IF L2_NORMALIZATION L2_POOL_2D LEAKY_RELU LESS LESS_EQUAL LOG LOG_SOFTMAX LOGICAL_AND
LOGICAL_NOT LOGICAL_OR LOGISTIC MAX_POOL_2D MAXIMUM MEAN MINIMUM MIRROR_PAD MUL NEG NOT_EQUAL PACK PAD PADV2 PRELU
QUANTIZE READ_VARIABLE REDUCE_MAX REDUCE_MIN RELU RELU6 RESHAPE RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR ROUND RSQRT
SELECT_V2 SHAPE SIN SLICE SOFTMAX SPACE_TO_BATCH_ND SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE
SQUEEZE STRIDED_SLICE SUB SUM SVDF TANH TRANSPOSE TRANSPOSE_CONV UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK VAR_HANDLE
WHILE ZEROS_LIKE
""".split())

# What to use instead, where TFLM has a near equivalent.
ALTERNATIVES = {
    "GELU": "HARD_SWISH or RELU in the model (TFLM has no GELU kernel), or the tanh form of GELU (TANH, MUL, ADD)",
    "SELECT": "SELECT_V2 (the broadcasting select)",
    "REDUCE_PROD": "a product over EXP/LOG of the factors, or the product moved out of the model",
    "RANDOM_UNIFORM": "random numbers fed as an input",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "two UNIDIRECTIONAL_SEQUENCE_LSTM (one on the reversed sequence)",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "UNIDIRECTIONAL_SEQUENCE_LSTM, or the cell unrolled (FULLY_CONNECTED, TANH)",
    "TOPK_V2": "ARG_MAX for the top class, or top-k in the application",
    "NON_MAX_SUPPRESSION_V4": "non-max suppression in the application, on the model's boxes and scores",
    "NON_MAX_SUPPRESSION_V5": "non-max suppression in the application, on the model's boxes and scores",
    "TILE": "broadcasting (an Add or Mul against a tensor of the wanted shape) or Concat of copies",
    "RANGE": "a constant initializer holding the sequence (the shape is static on a microcontroller)",
    "ONE_HOT": "Gather rows of a constant identity matrix (TFLM has GATHER), or an integer input",
    "WHERE": "the data-dependent selection (ONNX NonZero) moved to the application",
    "SIGN": "Div of x by Abs(x) + epsilon, or a Greater/Less pair with Cast and Sub",
    "LOCAL_RESPONSE_NORMALIZATION": "BatchNormalization instead of LRN (it folds into the conv)",
    "REVERSE_SEQUENCE": "Gather with constant reversed indices",
    "UNIQUE": "Unique (a data-dependent shape) moved to the application",
}
CUSTOM_HINT = ("a custom op: write and register a TFLM kernel for it (tflite_micro runtime's custom_op_registerers, "
               "MicroMutableOpResolver::AddCustom on the board), or replace it in the source model")


def tflite_ops(path) -> list[str]:
    """The op names a ``.tflite`` uses, in order of first use (custom ops by their custom name)."""
    from edgeopt.deps import require

    require("ai_edge_litert", "reading a .tflite's ops")
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    return list(dict.fromkeys(op["op_name"] for op in interp._get_ops_details()))


def unsupported_ops(ops: list[str]) -> list[str]:
    return [op for op in ops if op not in TFLM_OPS]


def alternative(op: str) -> str:
    return ALTERNATIVES.get(op, CUSTOM_HINT if not op.isupper() else "replace it in the source model with ops TFLM "
                            "has (edgeopt.converters.backends.tflite.micro.ops.TFLM_OPS lists them)")


def check_tflm_ops(path, profile_name: str = "") -> list[str]:
    """The model's ops; an op TFLM lacks is exit 3 naming it and its alternative."""
    ops = tflite_ops(path)
    missing = unsupported_ops(ops)
    if missing:
        where = f" for {profile_name}" if profile_name else ""
        more = f" (and {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise UnsupportedOpError(f"tflite-micro: the model needs op '{missing[0]}'{more}, which TensorFlow Lite for "
                                 f"Microcontrollers cannot run{where}", f"use {alternative(missing[0])}",
                                 details={"unsupported_ops": missing, "ops": ops})
    return ops
