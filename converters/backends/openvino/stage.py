"""Backend ``openvino``: OpenVINO IR (``model.xml``/``model.bin``) from the chain's ONNX.

FP32 keeps exact weights (``compress_to_fp16=False``); FP16 stores FP16 weights; INT8 is
``nncf.quantize`` on the converted model (calibration over the chain's calibration feeds). With
``max_accuracy_drop`` INT8 is a budgeted search over ``nncf.quantize`` (NNCF's options, then
``ignored_scope`` over quantizers ranked once: :mod:`edgeopt.converters.backends.openvino.search`) on one
part of the eval data, each hit confirmed on the other part, which the search never saw. NNCF's ONNX path would keep
BatchNormalization nodes; this backend quantizes the converted OpenVINO model, after normalize folded BN.

The runtime settings name ``INFERENCE_PRECISION_HINT`` explicitly: ``f32`` (on CPUs with AMX/AVX512-BF16
OpenVINO otherwise runs "FP32" in bf16), ``bf16`` for a ``--precision bf16`` artifact (exact FP32 weights in the
IR, run in bf16: the manifest says bf16), or a device's own (``f16`` on an NPU/GPU, profile settings). An fp32
artifact with a bf16 hint would run bf16 under an fp32 label: refused, ``--precision bf16`` says it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import (
    Backend,
    ChainContext,
    ChainOptions,
    Format,
    Intermediate,
    StageConfig,
    from_option,
)
from edgeopt.converters.registry import register_stage
from edgeopt.deps import library_prints, require
from edgeopt.enums import BackendName, Precision, QuantMode, StrEnum
from edgeopt.errors import GateFailedError, StageError, UsageError

from .quantizer import nncf_logs_follow_prints


class InferencePrecision(StrEnum):
    F32 = "f32"
    BF16 = "bf16"
    F16 = "f16"


class NNCFPreset(StrEnum):
    PERFORMANCE = "performance"  # symmetric weights and activations
    MIXED = "mixed"  # asymmetric activations (better for non-ReLU nets)


class OpenVINOConfig(StageConfig):
    precision: Precision = from_option("precision", Precision.FP32)
    mode: QuantMode = from_option("quant_mode")  # --quant-mode: static (nncf.quantize) or weights (nncf.compress_weights)
    device: str = "CPU"
    inference_precision: InferencePrecision = InferencePrecision.F32
    threads: int | None = from_option("threads")
    performance_hint: str = "LATENCY"
    subset_size: int = 300
    preset: NNCFPreset = NNCFPreset.PERFORMANCE
    model_type: str | None = None  # "transformer" for attention models
    fast_bias_correction: bool = True
    ignored_scope: tuple[str, ...] = ()  # OpenVINO op names kept in float
    # precision hints the bounded INT8 mode search also tries each mode at (its float ops and activations): bf16
    # where the profile's CPU runs it natively (OpenVINO's own default there), INT8 weights kept
    int8_activation_hints: tuple[InferencePrecision, ...] = ()
    bound: AccuracyBound = AccuracyBound()  # the accuracy-aware search's bound, metric and budget (the planner's)
    max_fallback_ops: int | None = from_option("max_fallback_ops")  # ops allowed off the NPU/GPU (edgeopt/placement)


@register_stage
class OpenVINOBackend(Backend):
    name = "openvino"
    backend = BackendName.OPENVINO
    Config = OpenVINOConfig
    accepts = (Format.ONNX,)
    produces = Format.OPENVINO_IR
    extra = "openvino"
    requires = ("openvino", "nncf")
    libraries = (("openvino", "openvino"), ("nncf", "nncf"))
    device_runtime = ("openvino", "openvino")
    deterministic = (True, "model.xml/model.bin byte-identical across clean builds (checked, tests/pipeline/test_pipeline.py)")
    preflight_check = "edgeopt.converters.backends.openvino.preflight:check_openvino"
    per_layer_profiler = "edgeopt.converters.backends.openvino.per_layer:profile_openvino"
    onnx_timer = "edgeopt.converters.backends.openvino.runs:onnx_timer"
    quantizes_itself = True
    quantizer = "edgeopt.converters.backends.openvino.quantizer:OpenVINOQuantizer"
    hooks = "edgeopt.converters.backends.openvino.hooks:HOOKS"
    precisions = (Precision.FP32, Precision.FP16, Precision.BF16, Precision.INT8)

    @classmethod
    def configure(cls, options: ChainOptions) -> OpenVINOConfig:
        s = options.backend_settings
        kw = {**options.for_config(OpenVINOConfig), "threads": options.threads or s.get("threads")}
        for key in ("device", "inference_precision", "performance_hint", "subset_size", "preset", "model_type"):
            if key in s:
                kw[key] = s[key]
        if options.precision == Precision.BF16:
            kw["inference_precision"] = InferencePrecision.BF16
        elif options.precision == Precision.INT8 and kw.get("device", "CPU") == "CPU" and \
                kw.get("inference_precision", "f32") == "f32" and Precision.BF16.value in (options.native_floats or ()):
            kw["int8_activation_hints"] = (InferencePrecision.BF16,)
        elif options.precision == Precision.FP32 and kw.get("inference_precision") == InferencePrecision.BF16.value:
            raise UsageError("openvino: the profile's inference_precision bf16 would run an fp32 artifact in bf16",
                             "use --precision bf16 (the artifact then says bf16), or inference_precision f32")
        return OpenVINOConfig(**kw)

    def run(self, model: Intermediate, config: OpenVINOConfig, ctx: ChainContext) -> Intermediate:
        ov = require("openvino", "the OpenVINO backend")
        from edgeopt.model import graph_inputs, graph_outputs, load_onnx

        proto = load_onnx(model.path, check=False)
        onnx_in, onnx_out = graph_inputs(proto), graph_outputs(proto)
        report = ctx.stage_report()
        try:
            ov_model = ov.convert_model(str(model.path))
        except Exception as err:  # noqa: BLE001
            lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()] or [type(err).__name__]
            ops = [ln for ln in lines if "failed for:" in ln or "not support" in ln or "conversion rule" in ln.lower()]
            ops += [ln for ln in lines if "larger than" in ln or "wasn't fully converted" in ln][:1]
            raise StageError(f"openvino: ov.convert_model failed: {'; '.join(ops[:2])[:300] if ops else lines[0][:240]}",
                             "the model uses ops OpenVINO's ONNX frontend cannot convert; try --backend onnxruntime") from err
        if config.device not in ("CPU", "AUTO") and config.device not in ov.Core().available_devices:
            from .runs import cpu_runs_hint_as

            hint = config.inference_precision.value
            ran = cpu_runs_hint_as(hint)
            ctx.warn(f"openvino: device {config.device} is not on this machine; the artifact is checked on CPU"
                     + (f", which runs its {hint} precision hint as {ran}" if ran != hint else ""))
        hint = config.inference_precision.value
        if config.precision == Precision.INT8:
            from edgeopt.quant_units import units_of

            ov_model, hint = self._int8(ov_model, onnx_in, config, ctx, model, report, proto)
            n_q, n_f = units_of(ov_model)
            report.setdefault("mode", QuantMode.STATIC.value)
            report["quantized"] = {"mode": report["mode"], "backend": self.backend.value, "quantized_units": n_q,
                                   "float_units": n_f, "units": "ops with weights (Convolution, MatMul, LSTM, ...)"}
        settings = {
            "device": config.device,
            "inference_precision": hint,
            "performance_hint": config.performance_hint,
            "threads": config.threads,
        }
        tmp = ctx.artifact_dir / ".openvino.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        ov.save_model(ov_model, str(tmp / "model.xml"), compress_to_fp16=config.precision == Precision.FP16)
        report["renamed_ops"] = stable_layer_names(tmp / "model.xml", {n.name for n in proto.graph.node})
        for f in ("model.xml", "model.bin"):
            os.replace(tmp / f, ctx.artifact_dir / f)
        shutil.rmtree(tmp, ignore_errors=True)
        runtime = {
            "backend": self.backend.value,
            "model": "model.xml",
            "weights": "model.bin",
            "settings": settings,
            "io": {
                "inputs": [{"name": t.name, "runtime_name": p.get_any_name(), "transpose": None}
                           for t, p in zip(onnx_in, ov_model.inputs, strict=True)],
                "outputs": [{"name": t.name, "runtime_name": r.get_any_name(), "transpose": None}
                            for t, r in zip(onnx_out, ov_model.outputs, strict=True)],
            },
        }
        checks = self._check(model.path, ctx, runtime)
        ctx.record_checks(checks)
        cos = checks.get("cosine_min")
        if cos is not None and cos < 0.99:
            ctx.warn(f"openvino: {config.precision.value} output differs from the ONNX input (cosine min {cos:.4f} on "
                     f"{checks['samples']} samples)")
        report.update(inference_precision_hint=settings["inference_precision"], device=config.device,
                      weights=_WEIGHTS[config.precision])
        from edgeopt.placement.gate import gate_placement

        gate_placement(ctx.artifact_dir / "model.xml", self.backend.value, settings,
                       {"NPU": "npu", "GPU": "gpu"}.get(config.device, "cpu"), config.max_fallback_ops, ctx)
        notes = {**model.notes, "runtime": runtime}
        return Intermediate(ctx.artifact_dir / "model.xml", Format.OPENVINO_IR, config.precision, notes)

    # ------------------------------------------------------------------ INT8
    def _int8(self, ov_model, onnx_in, config, ctx, model, report, proto):
        nncf = require("nncf", "OpenVINO INT8 quantization")
        if ctx.calib is None or len(ctx.calib) == 0:
            raise UsageError("openvino: INT8 needs calibration data", "give --calib FILE.npz")
        names = [t.name for t in onnx_in]
        calib = nncf.Dataset(ctx.calib.feeds(min(len(ctx.calib), config.subset_size)),
                             lambda feed: {k: v for k, v in feed.items() if k in names})
        common = {
            "preset": {NNCFPreset.PERFORMANCE: nncf.QuantizationPreset.PERFORMANCE,
                       NNCFPreset.MIXED: nncf.QuantizationPreset.MIXED}[config.preset],
            "target_device": {"CPU": nncf.TargetDevice.CPU, "GPU": nncf.TargetDevice.GPU,
                              "NPU": nncf.TargetDevice.NPU}.get(config.device, nncf.TargetDevice.ANY),
            "subset_size": min(len(ctx.calib), config.subset_size),
            "fast_bias_correction": config.fast_bias_correction,
            "model_type": nncf.ModelType.TRANSFORMER if config.model_type == "transformer" else None,
            "ignored_scope": nncf.IgnoredScope(names=list(config.ignored_scope), validate=False)
            if config.ignored_scope else None,
        }
        report.update(method="nncf.quantize (post-training, OpenVINO model)", nncf_preset=config.preset.value,
                      subset_size=common["subset_size"], calibration={"samples": common["subset_size"],
                                                                      "source": getattr(ctx.calib, "source", ""),
                                                                      "synthetic": getattr(ctx.calib, "synthetic", False)})
        try:
            with library_prints(), nncf_logs_follow_prints():  # stdout is the CLI's output
                if config.mode == QuantMode.WEIGHTS or (config.mode == QuantMode.AUTO and
                                                        config.bound.max_accuracy_drop is not None):
                    chosen = self._modes(ov_model, config, ctx, model, report, proto, common)
                    if chosen is not None:
                        return chosen
                hint = config.inference_precision.value
                if config.bound.max_accuracy_drop is None:
                    return nncf.quantize(ov_model, calib, **common), hint
                try:
                    q, hint, aa = quantize_with_bound(nncf, ov_model, calib, common, config, ctx, model.path)
                except GateFailedError as err:  # after a mode search that found nothing: say what each mode did
                    from .modes import with_modes_tried

                    raise with_modes_tried(err, report) from err
                report["accuracy_aware"] = aa
                if hint != config.inference_precision.value:
                    report["int8_activations"] = hint
                return q, hint
        except (GateFailedError, UsageError):
            raise
        except Exception as err:  # noqa: BLE001
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise StageError(f"openvino: NNCF INT8 quantization failed: {type(err).__name__}: {first}",
                             "try --precision fp32 for OpenVINO, or the onnxruntime backend") from err

    @staticmethod
    def _modes(ov_model, config, ctx, model, report, proto, common):
        """Weight-only (``--quant-mode weights``), or the bounded auto search over weight-only and static as built, on every graph
        (the fastest within the bound kept), each also at ``int8_activation_hints``: (the quantized model, the
        precision hint it runs at); None: no mode held the bound, go on with static and its fallbacks."""
        from edgeopt.converters.quantize.dynamic import op_mix
        from edgeopt.converters.quantize.modes import WeightsMode

        from .modes import auto_reason, search_ov_modes
        from .quantizer import OpenVINOQuantizer

        asked = config.mode == QuantMode.WEIGHTS  # --quant-mode weights
        if asked and config.bound.max_accuracy_drop is None:
            report.update(mode=QuantMode.WEIGHTS.value, method="nncf.compress_weights INT8 (weights only)")
            return OpenVINOQuantizer.quantize_model(ov_model, WeightsMode()), config.inference_precision.value
        mix = op_mix(proto)
        report.update(op_mix=mix, mode_reason="--quant-mode weights: weight-only INT8 judged on the bound" if asked
                      else auto_reason(mix))
        q = search_ov_modes(ov_model, ctx.calib, {k: v for k, v in common.items() if v is not None}, config, ctx,
                            model.path, report, requested=config.mode)
        if q is None:
            report["mode_reason"] += "; no mode held the bound as built: static INT8 with its options and units in float"
        return q

    # ------------------------------------------------------------------ check
    def _check(self, onnx_path, ctx: ChainContext, runtime: dict) -> dict:
        from edgeopt.converters.checks import compare
        from edgeopt.runtime.run_fn import run_fn

        data = ctx.check_samples or ctx.calib
        feeds = data.feeds(8) if data is not None else []
        if not feeds:
            return {"skipped": "no check samples"}
        ov_run = run_fn(ctx.artifact_dir, ctx.threads, runtime=runtime)  # the shipped runner, as on the device
        try:
            return compare(run_fn(onnx_path), ov_run, feeds)
        except Exception as err:  # noqa: BLE001
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise StageError(f"openvino: the converted model does not run: {first}", "report the model") from err


_WEIGHTS = {Precision.FP16: "fp16", Precision.FP32: "exact (compress_to_fp16=False)", Precision.INT8: "int8 (nncf)",
            Precision.BF16: "exact fp32 in the IR (compress_to_fp16=False); the CPU plugin runs them in bf16"}
_AUTO_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*_\d+$")


_LAYER = re.compile(r'<layer id="(?P<id>\d+)" name="(?P<name>[^"]*)" type="(?P<type>[^"]*)"')


def stable_layer_names(xml_path, keep: set[str]) -> int:
    """Rewrite OpenVINO's auto-generated layer names (``Constant_32045``: a type + a process-wide
    counter, also made while saving) to ``<type>_e<layer id>``, so the same inputs give a
    byte-identical ``model.xml`` whatever ran before in the process. Names from the ONNX graph
    (``keep``) stay; tensor names (which the runner uses) are not touched. Returns the count."""
    text = Path(xml_path).read_text()
    count = 0

    def sub(m: re.Match) -> str:
        nonlocal count
        if m["name"] in keep or not _AUTO_NAME.match(m["name"]):
            return m.group(0)
        count += 1
        return f'<layer id="{m["id"]}" name="{m["type"]}_e{m["id"]}" type="{m["type"]}"'

    Path(xml_path).write_text(_LAYER.sub(sub, text))
    return count


def quantize_with_bound(nncf, ov_model, calib, common: dict, config: OpenVINOConfig, ctx, onnx_path):
    """The budgeted accuracy-aware search over ``nncf.quantize`` (:mod:`edgeopt.converters.backends.openvino.search`)
    on one part of the eval data, each hit confirmed on the other part (never seen by the search); then the
    result is timed against FP32; where the CPU runs bf16 natively, the hit also with bf16 activations, kept when it
    holds and is faster. Returns (quantized model, the precision hint it runs at, report)."""
    import openvino as ov

    from edgeopt.converters.quantize.bound import prepare, warn_small_eval
    from edgeopt.converters.quantize.speed_verdict import speed_verdict
    from edgeopt.runtime.quick_timing import QUICK_S, interleaved_latency_ms

    from .runs import bf16_run, compiled_run
    from .search import no_int8_holds, search_nncf

    bound = float(config.bound.max_accuracy_drop)
    b = prepare(ctx, "openvino", onnx_path, config.bound)
    threads, search, confirm, fp32_run = b.threads, b.search, b.confirm, b.fp32_run
    out_names = [o.name for o in fp32_run.session.get_outputs()]
    result = search_nncf(nncf, ov_model, calib, common, fp32_run=fp32_run, out_names=out_names, search=search,
                         confirm=confirm, bound=bound, budget_s=config.bound.search_budget, progress=ctx.progress,
                         metric_spec=b.metric, search_path=b.search_path,
                         threads=threads, precision=config.inference_precision.value, confidence=b.confidence,
                         looks=b.looks)
    report = result.report
    warn_small_eval(ctx, report, "openvino")
    report["method"] = ("nncf.quantize: NNCF's options, then units (an activation quantizer and its readers' INT8 "
                        "weights) made float in the best option's model in the order of one ranking, within "
                        "--search-budget; each hit confirmed on the held-out part; the hit rebuilt with those ops in "
                        "ignored_scope (see final_build)")
    core = ov.Core()
    in_names = [p.get_any_name() for p in ov_model.inputs]
    if result.best is None:
        ctx.stage_report().update(accuracy_aware=report)
        bf16 = bf16_run(core, ov_model, in_names, out_names, threads)
        raise no_int8_holds(result, bound, None if bf16 is None else
                            result.m_confirm.fp32_value - result.m_confirm.score(bf16, confirm), config.device)
    q = result.best.artifact
    hint = config.inference_precision.value
    runs = {"fp32": compiled_run(core, ov_model, in_names, out_names, threads),
            "int8_final": compiled_run(core, q, in_names, out_names, threads, precision=hint)}
    feed = (ctx.check_samples or search).feed(0)
    bf16_acts = _hit_with_bf16_activations(core, q, in_names, out_names, config, result, report, threads)
    if bf16_acts is not None:
        runs["int8_bf16_activations"] = bf16_acts
    latency = interleaved_latency_ms(runs, feed, target_s=QUICK_S)
    final = "int8_final"
    if bf16_acts is not None and latency["int8_bf16_activations"] < latency["int8_final"]:
        final, hint = "int8_bf16_activations", InferencePrecision.BF16.value
    if bf16_acts is not None:
        report["bf16_activations"]["chosen"] = hint == InferencePrecision.BF16.value
    alternatives = _bf16_alternative(core, ov_model, in_names, out_names, threads, confirm, feed, result, bound) \
        if config.int8_activation_hints else None  # bf16 only named where the profile runs it (not an NPU's)
    ctx.stage_report().update(accuracy_aware=report)  # a speed-gate failure below still reports the search
    report["speed"] = speed_verdict(latency, final_key=final, runtime="openvino CPU (INFERENCE_PRECISION_HINT f32)",
                                    min_speedup=config.bound.min_speedup, ctx=ctx, prefix="openvino",
                                    alternatives=alternatives, threads=threads)
    return q, hint, report


def _hit_with_bf16_activations(core, q, in_names, out_names, config, result, report: dict, threads):
    """The search's hit (its units in float) run at the bf16 hint, where the profile's CPU and this one run bf16
    natively: judged by the search's own rules; its run when it holds, to be timed against the hit at f32 (its
    float units then run in bf16), else None. Said in ``report['bf16_activations']``."""
    from .modes import activation_hints
    from .runs import compiled_run, cpu_runs_bf16

    if InferencePrecision.BF16.value not in activation_hints(config, cpu_runs_bf16(core), report):
        return None
    run = compiled_run(core, q, in_names, out_names, threads, precision=InferencePrecision.BF16.value)
    c = result.judge(run)
    report["bf16_activations"] = {"met": bool(c.met), "search_value": round(c.search_value, 4),
                                  **({} if c.confirm_value is None else {"confirm_value": round(c.confirm_value, 4)}),
                                  **({} if c.halves_p90 is None else {"halves_drop_p90": c.halves_p90})}
    return run if c.met else None


def _bf16_alternative(core, ov_model, in_names, out_names, threads, confirm, feed, result, bound) -> dict | None:
    """Where this CPU runs bf16 natively (AMX/AVX512-BF16), OpenVINO's bf16 of the FP32 model, timed and
    with its own accuracy check on the held-out part: it can be the faster precision, and it can cost points
    (``holds``: its drop there is within ``bound``)."""
    from edgeopt.runtime.quick_timing import interleaved_latency_ms

    from .runs import BF16_SUGGEST, bf16_run

    run = bf16_run(core, ov_model, in_names, out_names, threads)
    if run is None:
        return None
    ms = interleaved_latency_ms({"bf16": run}, feed)["bf16"]
    value = result.m_confirm.score(run, confirm)  # the search's own metric, on data it never saw
    drop = result.m_confirm.fp32_value - value
    return {"bf16": {"latency_ms": ms, "value": round(value, 4), "holds": bool(drop <= bound + 1e-9),
                     "drop": f"drop {drop:.2f} points on the held-out part",
                     "suggest": BF16_SUGGEST}}


BACKEND = OpenVINOBackend
