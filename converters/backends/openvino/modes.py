"""OpenVINO's modes under a bound: the modes :class:`.quantizer.OpenVINOQuantizer` declares (NNCF weight-only
INT8, ``compress_weights``, and static INT8, ``nncf.quantize``), each built once on the converted model, the
fastest within the bound on OpenVINO kept (:func:`edgeopt.converters.quantize.bound.choose_mode`). Used by the
OpenVINO backend for every graph under a bound with ``--quant-mode auto`` (a convolutional one too: on rapidocr's
PP-LCNet classifier weight-only was 1.41x ONNX Runtime FP32 and static 1.16x) and for ``--quant-mode weights``."""

from __future__ import annotations

from edgeopt.converters.quantize.bound import ModeCandidate, choose_mode, prepare, warn_small_eval
from edgeopt.converters.quantize.modes import MODE_TYPES, QuantizedModel
from edgeopt.converters.quantize.speed_verdict import speed_verdict
from edgeopt.enums import QuantMode
from edgeopt.errors import GateFailedError
from edgeopt.quant_units import units_of

from .quantizer import OpenVINOQuantizer

RUNTIME = "openvino CPU (INFERENCE_PRECISION_HINT f32)"


def search_ov_modes(ov_model, calib, common: dict, config, ctx, onnx_path, report: dict, *, requested: QuantMode):
    """The chosen quantized ``ov.Model`` and the precision hint it runs at (its float ops and activations: the
    config's, or one of ``int8_activation_hints`` where this CPU runs it natively), or None when no candidate held
    the bound (a ``requested`` kind named with ``--quant-mode``: exit 5 instead). The modes are the quantizer's
    (:meth:`.modes.Quantizer.search_modes`)."""
    import openvino as ov

    from .runs import BF16_SUGGEST, bf16_run, compiled_run, cpu_runs_bf16, judged_at

    b = prepare(ctx, "openvino", onnx_path, config.bound)
    core = ov.Core()
    in_names = [p.get_any_name() for p in ov_model.inputs]
    out_names = [o.name for o in b.fp32_run.session.get_outputs()]
    base = config.inference_precision.value
    quantized: dict[str, tuple] = {}  # mode label -> (model, units): one NNCF call a mode, whatever the hint

    def build(mode, hint):
        def go():
            if mode.label() not in quantized:
                q = OpenVINOQuantizer.quantize_model(ov_model, mode, calib=calib, input_names=in_names, common=common)
                quantized[mode.label()] = (q, units_of(q))
            q, (n_q, n_f) = quantized[mode.label()]
            # judged at the hint the artifact runs with (an NPU profile's f16), as its validation runs it
            return (q, hint), compiled_run(core, q, in_names, out_names, b.threads, precision=hint), \
                QuantizedModel(None, mode, n_q, n_f)
        return go

    # plain bf16 judged beside the modes (named if faster) where the profile's CPU runs it natively and this one does
    bf16 = bf16_run(core, ov_model, in_names, out_names, b.threads) if config.int8_activation_hints else None
    hints = [base, *activation_hints(config, cpu_runs_bf16(core), report)]
    modes = OpenVINOQuantizer.search_modes(requested)
    choice = choose_mode([ModeCandidate(mode_label(m, h, base), build(m, h)) for h in hints for m in modes], b=b,
                         bound=float(config.bound.max_accuracy_drop), budget_s=config.bound.search_budget,
                         backend="openvino", progress=ctx.progress,
                         fp32_timed=compiled_run(core, ov_model, in_names, out_names, b.threads),
                         feed=(ctx.check_samples or b.search).feed(0),
                         floats=None if bf16 is None else {"bf16": (bf16, BF16_SUGGEST)})
    report["mode_search"] = choice.report | judged_at(base)
    warn_small_eval(ctx, choice.report, "openvino")
    if choice.label is None:
        if requested != QuantMode.AUTO:
            row = choice.report["candidates"][0]
            raise GateFailedError(f"openvino: {MODE_TYPES[requested].what} INT8 misses --max-accuracy-drop {config.bound.max_accuracy_drop:g}: "
                                  f"{row.get('why', '')}", "use --quant-mode auto, relax the bound, or --precision fp32",
                                  details=choice.report)
        return None
    q, hint = choice.artifact
    report.update(mode=choice.quantized.mode.kind.value,
                  method=f"{choice.label} INT8 (NNCF), the fastest mode within the bound")
    if hint != base:
        report["int8_activations"] = hint
    report["speed"] = speed_verdict(choice.latency, final_key=choice.label, runtime=RUNTIME,
                                    min_speedup=config.bound.min_speedup, ctx=ctx, prefix="openvino", threads=b.threads,
                                    alternatives=choice.floats)
    return q, hint


def mode_label(mode, hint: str, base: str) -> str:
    """A candidate's name: the mode, and the precision its float ops run at when not the config's own."""
    return mode.label() if hint == base else f"{mode.label()}, {hint} activations"


def activation_hints(config, cpu_runs_bf16: bool, report: dict) -> list[str]:
    """The config's ``int8_activation_hints`` this machine can check (bf16 needs AMX/AVX512-BF16 here too: the
    search and the validation run the artifact here); one it can't is said in the report."""
    hints = [h.value for h in config.int8_activation_hints]
    if hints and not cpu_runs_bf16:
        report["int8_activation_hints_skipped"] = (f"{', '.join(hints)} activations not tried: this machine's CPU "
                                                   "doesn't run bf16 natively, so they can't be checked here")
        return []
    return hints


def auto_reason(mix: dict) -> str:
    """``mode_reason`` of the bounded auto search on OpenVINO: the op mix, and that both modes are tried."""
    n = mix["nodes"]
    return (f"{mix['matmul_lstm_gru_share']:.0%} of the weights in MatMul/Gemm/LSTM/GRU nodes ({n['conv']} Conv, "
            f"{n['dynamic']} MatMul/Gemm/LSTM/GRU): on OpenVINO weight-only and static INT8 are both built on every "
            "graph, judged on the bound and timed on OpenVINO (each in its own block); the fastest within it kept")


def with_modes_tried(err: GateFailedError, report: dict) -> GateFailedError:
    """The gate failure of the static search that runs after the mode search found nothing, with what each mode did
    (``report["mode_search"]``'s candidates) added, so the error names every INT8 kind tried, not the last search's
    alone; ``err`` itself where no mode search ran."""
    rows = (report.get("mode_search") or {}).get("candidates") or []
    said = [f"{r['mode']}: {r['why']}" for r in rows if r.get("why")]
    if not said:
        return err
    return GateFailedError(f"{err.message}; the modes tried first: {'; '.join(said)}", err.hint,
                           details={**err.details, "mode_search": report["mode_search"]})
