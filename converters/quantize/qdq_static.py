"""Static INT8 post-training quantization with ``onnxruntime.quantization`` (QDQ format)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

from edgeopt.converters.base import CalibMethod
from edgeopt.deps import library_prints, require
from edgeopt.errors import StageError
from edgeopt.runtime import reference

from .presets import HardwarePreset, QType, QuantizerOptions

# Arithmetic between the heavy ops: left in float by the "weighted ops only" variant.
WEIGHTED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


class StaticSettings(QuantizerOptions):
    """One complete set of quantizer options (a preset plus overrides)."""

    moving_average: bool = False
    equalize: bool = False  # depthwise -> pointwise pairs equalized before calibration (:mod:`.equalize`)
    percentile: float = 99.999
    op_types_to_quantize: tuple[str, ...] | None = None
    nodes_to_exclude: tuple[str, ...] = ()

    @classmethod
    def from_preset(cls, preset: HardwarePreset, **overrides) -> StaticSettings:
        base = preset.model_dump(exclude={"name", "description"})
        return cls(**{**base, **overrides})

    def label(self) -> str:
        parts = [self.calib_method.value, f"act={self.activation_type.value}", f"w={self.weight_type.value}"]
        parts.append("per-channel" if self.per_channel else "per-tensor")
        if self.activation_symmetric:
            parts.append("act-symmetric")
        if self.moving_average:
            parts.append("moving-average")
        if self.equalize:
            parts.append("equalized")
        if not self.quantize_bias:
            parts.append("float-bias")
        if self.op_types_to_quantize:
            parts.append("ops=" + "/".join(self.op_types_to_quantize))
        if self.nodes_to_exclude:
            parts.append(f"excluded={len(self.nodes_to_exclude)}")
        return " ".join(parts)


def calibration_reader(dataset, input_names: list[str], limit: int | None = None):
    """A ``CalibrationDataReader`` over an ``edgeopt.data.Dataset`` (one sample per call)."""
    q = require("onnxruntime.quantization", "INT8 calibration")

    class _Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            n = len(dataset) if limit is None else min(limit, len(dataset))
            self._feeds = iter(dataset.feeds(n))

        def get_next(self):
            feed = next(self._feeds, None)
            if feed is None:
                return None
            return {k: np.asarray(v) for k, v in feed.items() if k in input_names}

    return _Reader()


def pre_process(src: Path, dst: Path) -> tuple[Path, str | None]:
    """``quant_pre_process`` (shape inference + ORT basic optimisation); on failure the input, and why. It runs
    with ``dst``'s folder as the current directory: when symbolic shape inference fails, ONNX Runtime writes
    ``sym_shape_infer_temp.onnx`` and an external-data file into the current directory (the user's)."""
    src, dst = Path(src).resolve(), Path(dst).resolve()
    with _cwd(dst.parent):
        return _pre_process(src, dst)


@contextlib.contextmanager
def _cwd(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _pre_process(src: Path, dst: Path) -> tuple[Path, str | None]:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        quant_pre_process(str(src), str(dst), skip_symbolic_shape=False)
        return dst, None
    except Exception as err:  # noqa: BLE001 - known to fail on some real models (pitfalls.md)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        try:
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
            return dst, f"symbolic shape inference failed ({first}); pre-processed without it"
        except Exception:  # noqa: BLE001
            return src, f"quant_pre_process failed ({first}); quantized the model as it was"


def quantize_static(src: Path, dst: Path, settings: StaticSettings, calib, input_names: list[str],
                    calib_samples: int | None = None, notes: dict | None = None,
                    calib_cache: Path | None = None) -> Path:
    """Run ``quantize_static`` with ``settings``. A crash of the quantizer with per-channel weights (ORT 1.32 on
    some valid models: ``_adjust_weight_scale_for_int32_bias``) is retried with the failing weight per-tensor
    (named in ``notes['per_tensor_retry']``), else with every weight per-tensor; any other library failure
    becomes a StageError. ``calib_cache``: a folder where the calibrated tensor ranges are kept
    (:func:`calibration_cache`), so a search's candidates that differ only in what they quantize (excluded nodes,
    a retry) calibrate once. ``settings.equalize``: the model's depthwise -> pointwise pairs are equalized first
    (:mod:`.equalize`, written once beside ``dst`` for all the candidates of a search) and that copy is quantized."""
    overrides: dict[str, list] = {}
    retried: list[dict] = []
    current = settings
    if settings.equalize:  # the same function with balanced channel ranges: quantized in the source's stead
        src = _equalized(Path(src), Path(dst).parent, calib, input_names)
    cache = calibration_cache(calib_cache, src, settings, calib, calib_samples) if calib_cache is not None else None
    for _ in range(16):
        try:
            _quantize_static_once(src, dst, current, calib, input_names, calib_samples, overrides, cache)
            break
        except Exception as err:  # noqa: BLE001 - the quantizer raises anything on odd graphs
            failing = _failing_weight(err) if current.per_channel else None
            if failing and failing[1] not in overrides:
                overrides[failing[1]] = [{}]  # a per-tensor override of that one weight
                retried.append({"node": failing[0], "weight": failing[1], "error": _first_line(err),
                                "retried": "this weight per-tensor"})
                continue
            if current.per_channel and not reference.is_run_error(err):  # the quantizer failed, not a calibration run
                retried.append({"node": failing[0] if failing else None, "weight": failing[1] if failing else None,
                                "error": _first_line(err), "retried": "every weight per-tensor"})
                current, overrides = current.model_copy(update={"per_channel": False}), {}
                continue
            raise StageError(f"qdq: onnxruntime static INT8 ({settings.label()}) failed: {_first_line(err)}",
                             "try --precision fp32, or a recipe that excludes the failing nodes") from err
    if notes is not None and retried:
        notes["per_tensor_retry"] = retried
    return dst


def equalized_path(src: Path, folder: Path, calib) -> Path:
    """Where :func:`quantize_static` keeps ``src`` equalized with ``calib`` for the candidates quantized into
    ``folder``: the FP32 model those candidates' Q/DQ models are compared with. Named by what decides it (the
    source file's path, size and time, the calibration data), so a later run never reads an earlier one's."""
    import hashlib

    st = Path(src).stat()
    h = hashlib.sha256(json.dumps([str(Path(src).resolve()), st.st_size, st.st_mtime_ns]).encode())
    for name, arr in sorted(getattr(calib, "arrays", {}).items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return Path(folder) / f"{Path(src).stem}.{h.hexdigest()[:12]}.equalized.onnx"


def _equalized(src: Path, folder: Path, calib, input_names: list[str]) -> Path:
    from .equalize import equalize

    out = equalized_path(src, folder, calib)
    if not out.is_file():
        tmp = out.with_name(out.stem + ".tmp.onnx")
        equalize(src, tmp, calib, input_names)
        tmp.replace(out)
    return out


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"


def _failing_weight(err: Exception) -> tuple[str | None, str] | None:
    """(node, weight initializer) the quantizer was working on when it crashed, read from its frames' locals."""
    found = None
    tb = err.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        info = local.get("bias_info")
        if info is not None and getattr(info, "weight_name", None):
            found = (getattr(info, "node_name", None), info.weight_name)
        elif isinstance(local.get("weight_name"), str) and "quantization" in tb.tb_frame.f_code.co_filename:
            found = (found[0] if found else None, local["weight_name"])
        tb = tb.tb_next
    return found


def calibration_cache(folder: Path, src: Path, settings: StaticSettings, calib, calib_samples: int | None) -> Path:
    """The file ORT's ``calibration_cache_path`` keeps the tensor ranges in, one per what decides them: the source
    model, the calibration data, the method (and its percentile, moving average) and the op types calibrated.
    Excluded nodes, weight granularity and activation types don't change a range, so they share it."""
    import hashlib

    h = hashlib.sha256(json.dumps([str(Path(src).resolve()), CalibMethod(settings.calib_method).value, settings.moving_average,
                                   settings.equalize,
                                   settings.percentile if settings.calib_method == CalibMethod.PERCENTILE else None,
                                   sorted(settings.op_types_to_quantize or ()), calib_samples]).encode())
    for name, arr in sorted(getattr(calib, "arrays", {}).items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arr[:calib_samples]).tobytes())
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder) / f"calibration-{h.hexdigest()[:16]}.json"


def _quantize_static_once(src: Path, dst: Path, settings: StaticSettings, calib, input_names: list[str],
                          calib_samples: int | None, overrides: dict, cache: Path | None = None) -> None:
    q = require("onnxruntime.quantization", "INT8 quantization")
    qtype = {QType.QUINT8: q.QuantType.QUInt8, QType.QINT8: q.QuantType.QInt8}
    method = {CalibMethod.MINMAX: q.CalibrationMethod.MinMax, CalibMethod.PERCENTILE: q.CalibrationMethod.Percentile}
    extra = {
        "ActivationSymmetric": settings.activation_symmetric,
        "WeightSymmetric": settings.weight_symmetric,
        "CalibMovingAverage": settings.moving_average,
        "QuantizeBias": settings.quantize_bias,
    }
    if overrides:
        extra["TensorQuantOverrides"] = overrides
    if settings.calib_method == CalibMethod.PERCENTILE:
        extra["CalibPercentile"] = settings.percentile
    tmp = dst.with_name(dst.stem + ".tmp.onnx")
    # the calibrators print progress on stdout, which belongs to the CLI's output
    reader = None if cache is not None and cache.is_file() else calibration_reader(calib, input_names, calib_samples)
    with library_prints():
        q.quantize_static(
            str(src), str(tmp), reader,
            quant_format=q.QuantFormat.QDQ,
            op_types_to_quantize=list(settings.op_types_to_quantize) if settings.op_types_to_quantize else None,
            per_channel=settings.per_channel,
            reduce_range=settings.reduce_range,
            activation_type=qtype[settings.activation_type],
            weight_type=qtype[settings.weight_type],
            nodes_to_exclude=list(settings.nodes_to_exclude) or None,
            calibrate_method=method[settings.calib_method],
            extra_options=extra,
            **({"calibration_cache_path": str(cache)} if cache is not None else {}),
        )
    tmp.replace(dst)


def count_ops(path: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def opset_of(path: Path) -> int:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)


def ensure_opset(src: Path, dst: Path, minimum: int = 13) -> tuple[Path, str | None]:
    """Per-channel DequantizeLinear (``axis``) needs opset >= 13: upgrade older models with onnx's converter.

    Returns (path, note); when the upgrade fails, (src, why) and the caller falls back to per-tensor weights.
    """
    import onnx
    from onnx import version_converter

    have = opset_of(src)
    if have >= minimum:
        return src, None
    try:
        model = version_converter.convert_version(onnx.load(str(src)), minimum)
        model.ir_version = max(model.ir_version, 7)
        onnx.checker.check_model(model)
        onnx.save(model, str(dst))
        return dst, f"opset {have} upgraded to {minimum} (per-channel INT8 needs DequantizeLinear with axis)"
    except Exception as err:  # noqa: BLE001
        return src, f"opset {have} could not be upgraded to {minimum} ({type(err).__name__}): per-tensor weights used"
