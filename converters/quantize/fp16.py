"""FP16 conversion for GPU profiles (``onnxruntime.transformers.float16``), inputs/outputs kept FP32."""

from __future__ import annotations

from pathlib import Path

from edgeopt.deps import require
from edgeopt.errors import StageError

# Ops whose FP16 versions lose range or are missing in ORT's CPU/GPU kernels.
FP16_BLOCK_LIST = ("Resize", "Range", "NonMaxSuppression", "TopK", "RoiAlign", "CumSum")


def convert_fp16(src: Path, dst: Path) -> Path:
    onnx = require("onnx", "FP16 conversion")
    f16 = require("onnxruntime.transformers.float16", "FP16 conversion")
    model = onnx.load(str(src))
    try:
        out = f16.convert_float_to_float16(model, keep_io_types=True, op_block_list=list(FP16_BLOCK_LIST))
    except Exception as err:  # noqa: BLE001
        raise StageError(f"qdq: FP16 conversion failed: {type(err).__name__}: {str(err)[:200]}",
                         "use --precision fp32 for this model") from err
    tmp = dst.with_name(dst.stem + ".tmp.onnx")
    onnx.save(out, str(tmp))
    tmp.replace(dst)
    return dst
