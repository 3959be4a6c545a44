"""The ``qdq`` stage (ONNX -> ONNX Q/DQ, shared by the ONNX Runtime and TVM backends): static INT8 written as
QuantizeLinear/DequantizeLinear, dynamic INT8 where it pays, FP16. (Recipes and ``--set`` written for its old name,
``quantize``, are read as ``qdq``: ``converters.registry.STAGE_ALIASES``.)

Static INT8 runs ``onnxruntime.quantization.quantize_static`` on the chain's calibration data
with a hardware preset picked from the profile's ISA (:mod:`.presets`). With
``max_accuracy_drop`` it becomes accuracy-aware (:mod:`.accuracy_aware`). Every output is
checked against the stage's input on the check samples (``compare_onnx``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import (
    CalibMethod,
    ChainContext,
    ChainOptions,
    Intermediate,
    Stage,
    StageConfig,
    from_option,
    user_option,
)
from edgeopt.converters.registry import register_stage
from edgeopt.enums import Precision
from edgeopt.errors import BadModelError, GateFailedError, StageError, UsageError

from .modes import QuantMode
from .presets import PRESETS, TENSORRT, get_preset, preset_for_profile


class QdqConfig(StageConfig):
    precision: Precision = from_option("precision", Precision.INT8)
    mode: QuantMode = from_option("quant_mode")
    backend: str | None = None  # the backend the result is for (named in the report)
    preset: str | None = None  # a name in presets.PRESETS, asked for; None: the profile's (below)
    # the planner's choice for the profile's ISA, and why: in the plan, its hash and --dry-run
    profile_preset: str | None = None
    profile_preset_reason: str | None = None
    profile_has_gpu: bool | None = None  # the planner's: FP16 without a GPU warns; INT8 names FP16 where it has one
    calib_method: CalibMethod | None = user_option(None, "INT8 calibration: minmax | percentile (default: the "
                                                         "profile's INT8 preset's, minmax).")
    per_channel: bool | None = user_option(None, "INT8 weights with one scale per output channel (default: the "
                                                 "preset's, per-channel); --no-per-channel: one scale per tensor.")
    calib_samples: int | None = 128
    pre_process: bool = True
    nodes_to_exclude: tuple[str, ...] = ()
    bound: AccuracyBound = AccuracyBound()  # the accuracy-aware search's bound, metric and budget (the planner's)

    @property
    def preset_name(self) -> str | None:
        """The preset this stage quantizes with: the one asked for, else the profile's (None: no plan made it)."""
        return self.preset or self.profile_preset


TENSORRT_STATIC_ONLY = ("TensorRT builds its INT8 engine from explicit Q/DQ (static INT8) only: dynamic INT8's "
                        "MatMulInteger/DynamicQuantizeLSTM would run outside TensorRT")


def _auto_reason(pays: bool, why: str, mix: dict, bounded: bool) -> str:
    """Why ``--quant-mode auto`` went the way it did (the stage report's ``mode_reason``)."""
    if pays and bounded:
        return why + ": dynamic (per-channel, per-tensor) and static tried, the fastest within the bound kept"
    reason = why if pays or mix["nodes"]["dynamic"] else \
        "convolutional model: static INT8 (dynamic INT8 is ~10x slower than FP32 on CNNs here)"
    return reason + ("; dynamic not tried" if bounded else "")


@register_stage
class QdqStage(Stage):
    name = "qdq"
    Config = QdqConfig

    @classmethod
    def configure(cls, options: ChainOptions) -> QdqConfig | None:
        if options.precision not in (Precision.INT8, Precision.FP16):
            return None
        from edgeopt.converters.registry import get_backend

        if get_backend(options.backend).quantizes_itself:
            return None
        preset, why = options.quant_preset
        return QdqConfig(backend=options.backend.value, profile_preset=preset, profile_preset_reason=why,
                              profile_has_gpu=options.profile_has_gpu, **options.for_config(QdqConfig))

    def run(self, model: Intermediate, config: QdqConfig, ctx: ChainContext) -> Intermediate:
        import onnx

        if config.preset is not None and config.preset not in PRESETS:
            get_preset(config.preset)  # raises the usage error with a hint
        report = ctx.stage_report()
        out = ctx.work_dir / f"{Path(model.path).stem}.{config.precision.value}.onnx"
        work = ctx.work_dir / "qdq"
        work.mkdir(parents=True, exist_ok=True)
        try:
            fp32 = onnx.load(str(model.path))
        except Exception as err:  # noqa: BLE001
            raise BadModelError(f"qdq: cannot read '{model.path}': {type(err).__name__}") from err
        self._check_loads(model.path)

        mode, pays = config.mode, False
        if config.precision == Precision.INT8 and mode in (QuantMode.AUTO, QuantMode.DYNAMIC):
            from .dynamic import dynamic_decision

            pays, why, mix = dynamic_decision(fp32)
            if pays and config.preset_name == TENSORRT:
                pays, why = False, TENSORRT_STATIC_ONLY
            report.update(op_mix=mix, dynamic_decision=why)
            if mode == QuantMode.DYNAMIC and not pays:
                raise UsageError(f"qdq: dynamic INT8 refused: {why}", "use --quant-mode static (or auto, the default)")
            if mode == QuantMode.AUTO:
                report["mode_reason"] = _auto_reason(pays, why, mix, config.bound.max_accuracy_drop is not None)
        if config.precision == Precision.FP16:
            from .fp16 import convert_fp16

            if config.profile_has_gpu is False:
                ctx.warn("qdq: FP16 for a profile without a GPU: ONNX Runtime's CPU provider runs most FP16 ops "
                         "through casts, so expect no speed-up over FP32")
            convert_fp16(Path(model.path), out)
            report.update(method="fp16 (onnxruntime.transformers.float16, keep_io_types)")
        elif mode == QuantMode.WEIGHTS:
            raise UsageError("qdq: weight-only INT8 is not available on ONNX Runtime",
                             "use mode static or dynamic (or auto, the default)")
        elif config.bound.max_accuracy_drop is not None and (mode == QuantMode.DYNAMIC or pays):
            from .qdq_modes import search_qdq_modes

            static = None if mode == QuantMode.DYNAMIC else self._static_setup(model, config, ctx, fp32, work, report)
            if not search_qdq_modes(Path(model.path), out, work, config, ctx, report, static=static):
                report["mode_reason"] += ("; none held the bound as built, nor dynamic with ops in float: static INT8 "
                                          "with its options and ops in float")
                self._static(model, config, ctx, fp32, out, work, report, setup=static)
        elif mode == QuantMode.DYNAMIC or pays:
            from .dynamic import quantize_dynamic

            quantize_dynamic(Path(model.path), out, per_channel=config.per_channel is not False)
            report.update(mode=QuantMode.DYNAMIC.value, method="dynamic int8 (weights int8, activations at run time), "
                          + ("per-channel" if config.per_channel is not False else "per-tensor"))
        else:
            self._static(model, config, ctx, fp32, out, work, report)
        if config.precision == Precision.INT8:
            from edgeopt.quant_units import units_of

            n_q, n_f = units_of(out)
            report.setdefault("mode", QuantMode.STATIC.value)
            report["quantized"] = {"mode": report["mode"], "backend": config.backend, "quantized_units": n_q,
                                   "float_units": n_f, "units": "ops with weights (Conv, MatMul, Gemm, LSTM, GRU, ...)"}

        checks = self._check(Path(model.path), out, ctx)
        ctx.record_checks(checks)
        cos = checks.get("cosine_min")
        if cos is not None and cos < 0.99:
            ctx.warn(f"qdq: {config.precision.value} output vs FP32: cosine {cos:.4f} at worst on "
                     f"{checks['samples']} samples (under 0.99); the task metric is judged on the eval data next")
        if config.bound.min_cosine is not None and cos is not None and cos < config.bound.min_cosine:
            raise GateFailedError(
                f"qdq: {config.precision.value} output cosine {cos:.4f} vs FP32 is below --min-cosine {config.bound.min_cosine}",
                "use --max-accuracy-drop for accuracy-aware INT8, or --precision fp32", details=checks)
        return Intermediate(out, model.format, config.precision, dict(model.notes))

    # ------------------------------------------------------------------ helpers
    def _static(self, model, config, ctx, fp32, out, work, report, setup=None) -> None:
        from .qdq_modes import warn_retry
        from .qdq_static import count_ops, quantize_static

        src, settings, input_names, _, _ = setup or self._static_setup(model, config, ctx, fp32, work, report)
        if config.bound.max_accuracy_drop is not None:
            from .accuracy_aware import accuracy_aware

            path, aa = accuracy_aware(src, work, settings, ctx, config.bound, input_names, config.calib_samples,
                                      fp16_hint=bool(config.profile_has_gpu), preset=report.get("preset"))
            report["accuracy_aware"] = aa
            shutil.copyfile(path, out)
        else:
            notes: dict = {}
            quantize_static(src, out, settings, ctx.calib, input_names, config.calib_samples, notes=notes)
            report["settings"] = settings.model_dump(mode="json")
            if notes:
                report["per_tensor_retry"] = notes["per_tensor_retry"]
                warn_retry(ctx, notes, "static INT8")
        ops = count_ops(out)
        report["quantize_linear_nodes"] = ops.get("QuantizeLinear", 0)
        report["dequantize_linear_nodes"] = ops.get("DequantizeLinear", 0)

    def _static_setup(self, model, config, ctx, fp32, work, report) -> tuple:
        """(pre-processed source, StaticSettings, input names, calibration data, samples) of static INT8."""
        from .qdq_static import StaticSettings, ensure_opset, pre_process

        if ctx.calib is None or len(ctx.calib) == 0:
            raise UsageError("qdq: static INT8 needs calibration data", "give --calib FILE.npz")
        if config.preset_name:
            preset = get_preset(config.preset_name)
            why = f"preset {config.preset} asked for" if config.preset else (config.profile_preset_reason
                                                                              or "chosen by the planner")
        else:  # a config made without a plan (the stage used directly): this machine's
            preset, why = preset_for_profile(None)
        overrides = {}
        if config.calib_method is not None:
            overrides["calib_method"] = config.calib_method
        if config.per_channel is not None:
            overrides["per_channel"] = config.per_channel
        if config.nodes_to_exclude:
            overrides["nodes_to_exclude"] = config.nodes_to_exclude
        src = Path(model.path)
        src, opset_note = ensure_opset(src, work / "opset13.onnx")
        if opset_note:
            report["opset"] = opset_note
            if src == Path(model.path) and overrides.get("per_channel", preset.per_channel):
                overrides["per_channel"] = False
                ctx.warn(f"qdq: {opset_note}")
        settings = StaticSettings.from_preset(preset, **overrides)
        pre_note = None
        if config.pre_process:
            src, pre_note = pre_process(src, work / "preprocessed.onnx")
            if pre_note:
                ctx.warn(f"qdq: {pre_note}")
        input_names = [i.name for i in fp32.graph.input if i.name not in {x.name for x in fp32.graph.initializer}]
        report.update(method="static int8 QDQ (onnxruntime.quantization)", preset=preset.name, preset_reason=why,
                      pre_process=pre_note or ("done" if config.pre_process else "skipped"),
                      calibration={"samples": min(len(ctx.calib), config.calib_samples or len(ctx.calib)),
                                   "source": getattr(ctx.calib, "source", ""),
                                   "synthetic": getattr(ctx.calib, "synthetic", False)})
        return src, settings, input_names, ctx.calib, config.calib_samples

    @staticmethod
    def _check_loads(path) -> None:
        """The input must load in ONNX Runtime (a model it rejects is this stage's bad input)."""
        from edgeopt.runtime.reference import session

        try:
            session(path, log_level=4)
        except ImportError:  # ONNX Runtime itself missing: not the model's fault
            raise
        except Exception as err:  # noqa: BLE001
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise StageError(f"qdq: ONNX Runtime cannot load the model: {first}",
                             "fix or re-export the model; quantization needs a model ONNX Runtime runs") from err

    @staticmethod
    def _check(before: Path, after: Path, ctx: ChainContext) -> dict:
        from edgeopt.converters.checks import compare_onnx

        data = ctx.check_samples or ctx.calib
        feeds = data.feeds(8) if data is not None else []
        if not feeds:
            return {"skipped": "no check samples"}
        try:
            return compare_onnx(before, after, feeds)
        except Exception as err:  # noqa: BLE001 - the quantized model failing to run is this stage's failure
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise StageError(f"qdq: the quantized model does not run in ONNX Runtime: {first}",
                             "use --precision fp32, or report the model") from err
