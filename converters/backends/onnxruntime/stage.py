"""Backend ``onnxruntime``: the (FP32, FP16 or QDQ INT8) ONNX model plus its session settings.

The artifact holds the unoptimized ``model.onnx`` and the manifest's ``runtime.settings``: the
session's graph optimization level (ALL by default: it is applied where the model is loaded, so the
device's own CPU gets its layout transforms; on x86 ALL is ~2x faster than EXTENDED for convnets),
threads and the execution provider from the profile. With ``save_optimized`` it also writes a model
optimized at EXTENDED (``model.optimized.onnx``, listed as ``runtime.optimized_model``): a model saved
at ALL is tied to the CPU it was optimized on, so a saved one stays portable.

With TensorRT's execution provider (the Jetson profiles) no engine is built here: TensorRT engines are not portable
across GPUs, so ONNX Runtime's TensorRT EP builds one on the board when the session is created. The settings turn its
engine cache on, under the device's work dir (``{work_dir}``, which the runner fills in), so the first
``remote-bench`` builds the engine there and later runs load it; the manifest says so (``runtime.engine_build``).
A QDQ model for TensorRT is checked against its explicit-quantization rules first
(:mod:`edgeopt.converters.backends.onnxruntime.tensorrt_qdq`): the result is on the stage's checks, and a violation fails the stage.
"""

from __future__ import annotations

import shutil

from pydantic import BaseModel, ConfigDict

from edgeopt.converters.base import (
    Backend,
    ChainContext,
    ChainOptions,
    Format,
    Intermediate,
    StageConfig,
    from_option,
    user_option,
)
from edgeopt.converters.quantize.presets import TRT_PROVIDER
from edgeopt.converters.registry import register_stage
from edgeopt.enums import BackendName, Precision, StrEnum
from edgeopt.placement.gate import MAX_FALLBACK_OPS_HELP, gate_placement


class OrtSettings(BaseModel):
    """``runtime.settings`` of an ``onnxruntime`` artifact: every key the runner
    (``edgeopt/runtime/runners/onnxruntime.py``) applies to its session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str = "CPUExecutionProvider"
    graph_optimization_level: str = "ORT_ENABLE_ALL"  # a GraphOptimizationLevel member's name
    threads: int | None = None
    fallback_providers: list[str] = []  # tried in order where ``provider`` is not there; the CPU last
    provider_options: dict[str, str | bool | int | float] = {}  # ``provider``'s options
    # ONNX Runtime's own graph optimizers left off (``InferenceSession(disabled_optimizers=...)``) where the session
    # has a provider other than the CPU: e.g. WeightBiasQuantization, which gives every quantized Conv/Gemm an
    # int32-bias DequantizeLinear at load time (TensorRT rejects it, CUDA runs it on the CPU; the CPU alone fuses it)
    disabled_optimizers: list[str] = []
    allow_spinning: bool | None = None  # False: pool threads sleep after each call (timings beside another runtime)

    def settings(self) -> dict:
        """The manifest's dict: the keys set (an artifact written before a key existed reads the same)."""
        return self.model_dump(mode="json", exclude_unset=True)

class GraphOptLevel(StrEnum):
    DISABLE = "disable"
    BASIC = "basic"
    EXTENDED = "extended"
    ALL = "all"


ORT_LEVEL = {
    GraphOptLevel.DISABLE: "ORT_DISABLE_ALL",
    GraphOptLevel.BASIC: "ORT_ENABLE_BASIC",
    GraphOptLevel.EXTENDED: "ORT_ENABLE_EXTENDED",
    GraphOptLevel.ALL: "ORT_ENABLE_ALL",
}



WORK_DIR = "{work_dir}"  # the device's work dir, filled in by the runner (edgeopt/runtime/runners/onnxruntime.py)
TRT_ENGINE_CACHE = {"trt_engine_cache_enable": True, "trt_engine_cache_path": f"{WORK_DIR}/trt-engines"}


class OnnxRuntimeConfig(StageConfig):
    provider: str = "CPUExecutionProvider"
    fallback_providers: tuple[str, ...] = ()  # tried in order where ``provider`` is not there; CPU is always last
    provider_options: dict[str, str | bool | int | float] = {}  # ``provider``'s options (TensorRT: its engine cache)
    threads: int | None = from_option("threads")
    graph_optimization_level: GraphOptLevel = GraphOptLevel.ALL
    save_optimized: bool = False
    saved_optimization_level: GraphOptLevel = GraphOptLevel.EXTENDED
    max_fallback_ops: int | None = user_option(None, MAX_FALLBACK_OPS_HELP, ge=0)


@register_stage
class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    backend = BackendName.ONNXRUNTIME
    Config = OnnxRuntimeConfig
    accepts = (Format.ONNX,)
    produces = Format.ONNX
    extra = None
    requires = ("onnxruntime",)
    libraries = (("onnxruntime", "onnxruntime"),)
    device_runtime = ("onnxruntime", "onnxruntime")
    deterministic = (True, "model.onnx byte-identical across clean builds (checked, tests/pipeline/test_pipeline.py)")
    preflight_check = "edgeopt.converters.backends.onnxruntime.preflight:check_onnxruntime"
    per_layer_profiler = "edgeopt.converters.backends.onnxruntime.per_layer:profile_onnxruntime"
    quantizes_itself = False
    quantizer = "edgeopt.converters.quantize.qdq_quantizer:QdqQuantizer"
    hooks = "edgeopt.converters.backends.onnxruntime.hooks:HOOKS"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8)

    @classmethod
    def configure(cls, options: ChainOptions) -> OnnxRuntimeConfig:
        s = options.backend_settings
        provider = s.get("provider", "CPUExecutionProvider")
        provider_options = dict(s.get("provider_options") or {})
        if provider == TRT_PROVIDER:  # the engine is built on the board and kept there (the profile may override)
            provider_options = {**TRT_ENGINE_CACHE, **provider_options}
            if options.precision != Precision.FP16:  # float layers run at the precision they were judged at (FP32)
                provider_options.pop("trt_fp16_enable", None)
        return OnnxRuntimeConfig(
            provider=provider,
            fallback_providers=tuple(s.get("fallback_providers") or ()),
            provider_options=provider_options,
            **{**options.for_config(OnnxRuntimeConfig), "threads": options.threads or s.get("threads")},
        )

    def run(self, model: Intermediate, config: OnnxRuntimeConfig, ctx: ChainContext) -> Intermediate:
        import onnxruntime as ort

        from edgeopt.model import graph_inputs, graph_outputs, load_onnx
        from edgeopt.runtime.runners.onnxruntime import session_kwargs, session_options

        target = ctx.artifact_dir / "model.onnx"
        shutil.copyfile(model.path, target)
        settings = {
            "provider": config.provider,
            "graph_optimization_level": ORT_LEVEL[config.graph_optimization_level],
            "threads": config.threads,
        }
        if config.fallback_providers or config.provider_options:
            settings.update(fallback_providers=list(config.fallback_providers),
                            provider_options=dict(config.provider_options))
        runtime = {"backend": self.backend.value, "model": target.name, "settings": settings}
        if config.provider == TRT_PROVIDER:
            tensorrt_preflight(model.path, ctx)
            runtime.update(tensorrt_loaded_settings(target, settings, config, ctx))
            runtime["engine_build"] = engine_build(config)
        runtime["settings"] = OrtSettings(**settings).settings()  # typed: every key the runner applies
        # Load it once here: a model ONNX Runtime cannot load must fail the conversion, not the device.
        so = session_options(ort, settings, config.threads)
        ort.InferenceSession(str(target), so, providers=["CPUExecutionProvider"], **session_kwargs(settings))
        if config.save_optimized:
            saved = ort.SessionOptions()
            saved.log_severity_level = 3
            saved.graph_optimization_level = getattr(
                ort.GraphOptimizationLevel, ORT_LEVEL[config.saved_optimization_level])
            saved.optimized_model_filepath = str(ctx.artifact_dir / "model.optimized.onnx")
            ort.InferenceSession(str(target), saved, providers=["CPUExecutionProvider"])
            runtime["optimized_model"] = "model.optimized.onnx"
        proto = load_onnx(target, check=False)
        runtime["io"] = {
            kind: [{"name": t.name, "runtime_name": t.name, "transpose": None} for t in specs]
            for kind, specs in (("inputs", graph_inputs(proto)), ("outputs", graph_outputs(proto)))
        }
        unit = "cpu" if config.provider == "CPUExecutionProvider" else "gpu"  # the profiles' other providers: GPUs
        gate_placement(target, self.backend.value, runtime["settings"], unit, config.max_fallback_ops, ctx)
        notes = {**model.notes, "runtime": runtime}
        return Intermediate(target, Format.ONNX, model.precision, notes)


def tensorrt_preflight(path, ctx: ChainContext) -> None:
    """A QDQ model TensorRT will build: its Q/DQ checked against TensorRT's rules (on the stage's checks and
    report); a violation is a StageError naming the nodes."""
    from edgeopt.converters.backends.onnxruntime.tensorrt_qdq import check_tensorrt_qdq, has_qdq
    from edgeopt.errors import StageError
    from edgeopt.model import load_onnx

    proto = load_onnx(path, check=False)
    if not has_qdq(proto):
        return
    result = check_tensorrt_qdq(proto)
    facts = result.model_dump(mode="json")
    ctx.record_checks({"tensorrt_qdq_passed": result.passed, "tensorrt_qdq_violations": len(result.violations)})
    ctx.stage_report()["tensorrt_qdq"] = facts
    if result.placement:
        ctx.warn(f"onnxruntime: {len(result.placement)} linear op(s) will run in float on TensorRT, not INT8: "
                 f"{result.summary(placement=True)}")
    if not result.passed:
        raise StageError(f"onnxruntime: the QDQ model breaks TensorRT's explicit-quantization rules at "
                         f"{len(result.nodes())} node(s): {result.summary()}",
                         "quantize it with the tensorrt preset (symmetric signed INT8, per-channel weights: the "
                         "jetson profiles' default), or use --precision fp16", details={"tensorrt_qdq": facts})


def tensorrt_loaded_settings(target, settings: dict, config: OnnxRuntimeConfig, ctx: ChainContext) -> dict:
    """For a QDQ model on TensorRT: ONNX Runtime's WeightBiasQuantization left off in ``settings`` (its int32-bias DQs
    are what TensorRT's parser rejects), the graph the provider receives checked with TensorRT's Q/DQ rules (exit 5
    on an int32 DQ), and the manifest's list of the float layers with the precision TensorRT runs them at."""
    from edgeopt.converters.backends.onnxruntime.as_loaded_check import (
        WEIGHT_BIAS_QUANTIZATION,
        check_as_loaded,
        float_layers,
    )
    from edgeopt.converters.backends.onnxruntime.tensorrt_qdq import has_qdq
    from edgeopt.model import load_onnx

    proto = load_onnx(target, check=False)
    if not has_qdq(proto):
        return {}
    settings["disabled_optimizers"] = [WEIGHT_BIAS_QUANTIZATION]
    ctx.stage_report()["tensorrt_qdq_as_loaded"] = check_as_loaded(target, settings)
    fp16 = bool(config.provider_options.get("trt_fp16_enable"))
    return {"float_layers": float_layers(proto, "fp16" if fp16 else "fp32")}


def engine_build(config: OnnxRuntimeConfig) -> dict:
    """What the manifest says about the TensorRT engine: built on the board, where, and when."""
    cache = config.provider_options.get("trt_engine_cache_path") if config.provider_options.get(
        "trt_engine_cache_enable") else None
    return {
        "built_here": False,
        "where": "on the device: ONNX Runtime's TensorRT execution provider builds the engine when the session is "
                 "created (TensorRT engines are not portable across GPUs or TensorRT versions)",
        "cache": cache,
        "when": ("the first run on the board (remote-bench) builds it, which can take minutes, and keeps it in the "
                 "cache; later runs load it" if cache else "every session creation builds it (no engine cache)"),
        "work_dir": f"{WORK_DIR}: the device's work dir (remote-bench sets EDGEOPT_WORK_DIR; else "
                    "~/.cache/edgeopt-remote)",
    }


BACKEND = OnnxRuntimeBackend
