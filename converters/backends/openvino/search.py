"""Accuracy-aware INT8 for OpenVINO: the budgeted search of :mod:`edgeopt.converters.quantize.strategy` over
``nncf.quantize``.

Options first (for a model with several outputs, its output heads in float right after the first: :func:`heads_first`;
then NNCF's documented ones: ``fast_bias_correction=False``, preset ``mixed``, and for
attention/MatMul-heavy graphs ``model_type=transformer`` with SmoothQuant on and off), then float
fallback over **units**: an activation quantizer (FakeQuantize) and the ops that read it, which is what
NNCF's ``ignored_scope`` of those ops leaves in float (their input quantizer *and* their INT8 weights).
The units of the best option are ranked **once** (by how much the output error vs FP32 shrinks when only
that unit is float; past ``BYPASS_LIMIT`` units by each one's own error, the activation's per channel plus
its readers' weights', read in one run), and a candidate is that option's INT8 model with the top-k units
made float in place (the quantizer removed, the readers' original FP32 weights put back: no recalibration,
one compile each); the units and their ranking are :mod:`.units`. The hit is then rebuilt once with
``nncf.quantize`` and those ops in ``ignored_scope`` (calibration and bias correction made for it), kept when it
also meets the bound on both parts (else the search's model is). ``nncf.quantize_with_accuracy_control`` is not used: it
reverts one group at a time and re-ranks the rest after each step, so it does not finish within a budget.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from edgeopt.converters.quantize.accuracy_aware import WEIGHTED_LABEL, skip_all_ops_option
from edgeopt.converters.quantize.candidate import SearchResult
from edgeopt.converters.quantize.heads import HeadsOption
from edgeopt.converters.quantize.sensitivity import UNRANKED
from edgeopt.converters.quantize.strategy import run_search, with_heads_option
from edgeopt.converters.quantize.verdict import gate_failure

from .float_cost import cheaper_float
from .heads import output_heads
from .runs import compiled_run, judged_at
from .units import LOCAL_METHOD, FloatUnits, activation_quantizers, consumers_to_ignore, local_error_ranking

ATTENTION_HINTS = {"Softmax", "MVN"}


def looks_like_transformer(ov_model) -> bool:
    """Attention (Softmax and a MatMul of two activations, or several MatMuls): NNCF's TRANSFORMER type. A CNN
    with one small attention block counts too: the transformer type leaves the attention's ops unquantized."""
    types = [op.get_type_name() for op in ov_model.get_ordered_ops()]
    if not (set(types) & ATTENTION_HINTS):
        return False
    act_matmul = any(op.get_type_name() == "MatMul" and all(
        i.get_source_output().get_node().get_type_name() != "Constant" for i in op.inputs())
        for op in ov_model.get_ordered_ops())
    return act_matmul or types.count("MatMul") >= 4


def option_variants(nncf, common: dict, transformer: bool,
                    other_types: list[str] | None = None) -> list[tuple[str, dict]]:
    """NNCF's own options, most likely to help first; each a full kwargs dict for ``nncf.quantize``.

    ``other_types``: the model's op types that carry no weight; given, the second option is the weighted ops only
    (those types in ``ignored_scope``: FakeQuantize at the inputs of Convolution/MatMul/... alone), as ONNX
    Runtime's search places Q/DQ before it tries another calibration. Quantizing the arithmetic between them is
    what breaks most models INT8 breaks: on magika (one-hot MatMul, tanh-GELU, two unrolled LayerNorms, a Conv)
    NNCF's defaults agreed with FP32 on 68 % of files, its weighted ops alone on 98 %."""
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    mixed = nncf.QuantizationPreset.MIXED
    out = []
    if transformer and common.get("model_type") is None:  # NNCF's documented type for attention models: first
        tr = dict(common, model_type=nncf.ModelType.TRANSFORMER)
        out.append(("model_type=transformer (SmoothQuant on)", tr))
        off = AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(convolution=-1, matmul=-1))
        out.append(("model_type=transformer, SmoothQuant off", dict(tr, advanced_parameters=off)))
        out.append(("nncf defaults", dict(common)))
        common = tr
    else:
        out.append(("nncf defaults", dict(common)))
    if other_types:
        weighted = dict(common, ignored_scope=with_ignored(nncf, common.get("ignored_scope"), types=other_types))
        out.insert(1, (WEIGHTED_ONLY, weighted))
        if common.get("preset") != mixed:
            out.insert(2, (f"{WEIGHTED_LABEL}, preset mixed", dict(weighted, preset=mixed)))
    if common.get("preset") != mixed:
        out.append(("preset mixed (asymmetric activations)", dict(common, preset=mixed)))
    # full bias correction runs the model layer by layer: the slowest option, so the last ones
    out.append(("fast_bias_correction=False", dict(common, fast_bias_correction=False)))
    if common.get("preset") != mixed:
        out.append(("preset mixed + fast_bias_correction=False", dict(common, preset=mixed, fast_bias_correction=False)))
    return out


def heads_first(nncf, variants: list[tuple[str, dict]], heads: tuple[str, ...]) -> list[tuple[str, dict]]:
    """``variants`` with the searches' heads option (:func:`edgeopt.converters.quantize.strategy.with_heads_option`)
    for a model with several outputs: the first option with its output heads in ``ignored_scope`` and activation
    ranges averaged over the calibration samples (NNCF's ``MEAN_MINMAX``, the counterpart of ONNX Runtime's
    moving-average calibration) rather than their extremes. Depthwise pairs are not equalized here: the model is
    NNCF's to read, and equalizing is a rewrite of the ONNX source (:mod:`edgeopt.converters.quantize.equalize`)."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    def make(h: HeadsOption) -> dict:
        kw = dict(variants[0][1])
        adv = kw.get("advanced_parameters") or AdvancedQuantizationParameters()
        kw["advanced_parameters"] = dataclasses.replace(
            adv, activations_range_estimator_params=RangeEstimatorParametersSet.MEAN_MINMAX)
        kw["ignored_scope"] = with_ignored(nncf, kw.get("ignored_scope"), names=h.heads)
        return kw

    return with_heads_option(variants, HeadsOption(heads, moving_average=True) if heads else None, make)


WEIGHTED_ONLY = f"{WEIGHTED_LABEL} (every other op type in ignored_scope)"
NO_WEIGHT_TYPES = {"Parameter", "Result", "Constant"}


def types_without_weights(ov_model) -> list[str]:
    """The op types of ``ov_model`` that carry no weight (what the weighted-ops-only option ignores)."""
    from .quantizer import WEIGHT_OPS

    return sorted({op.get_type_name() for op in ov_model.get_ordered_ops()} - set(WEIGHT_OPS) - NO_WEIGHT_TYPES)


def with_ignored(nncf, scope, *, names=(), types=()):
    """``scope`` (an ``nncf.IgnoredScope`` or None) with more names and types; never validated (the types are
    read from the model, and a name may be gone after NNCF's own transformations)."""
    return nncf.IgnoredScope(names=sorted({*(scope.names if scope else ()), *names}),
                             patterns=list(scope.patterns) if scope else [],
                             types=sorted({*(scope.types if scope else ()), *types}), validate=False)


def skip_option(label: str, variants: list[tuple[str, dict]], bound: float):
    """``skip_when`` of an option: a full-bias-correction one on the worse preset
    (:func:`bias_correction_on_the_better_preset`), and every option quantizing every op once the weighted ops
    only scored more than the bound above the first option (the placement loses, not the calibration)."""
    bias = bias_correction_on_the_better_preset(label, variants)
    every_op = (lambda scored: None) if label.startswith(WEIGHTED_LABEL) or label == variants[0][0] else \
        skip_all_ops_option(bound, base=variants[0][0])
    return lambda scored: bias(scored) or every_op(scored)


FULL_BIAS_CORRECTION = "fast_bias_correction=False"
MIXED = "preset mixed (asymmetric activations)"


def bias_correction_on_the_better_preset(label: str, variants: list[tuple[str, dict]]):
    """``skip_when`` of a full-bias-correction option: it costs about two plain quantizations (it runs the model
    layer by layer), so it runs on the preset that scored better only (on a tie, the plain one: Silero VAD scored
    the same with both, and built both). Bias correction and the preset act on different errors (weights' bias
    shift, activations' asymmetry): the better preset stays better with it.

    It is not skipped when the best option is far from the bound: on PP-OCRv4's recogniser it moved the metric
    by 1-2 points only (7 -> 6 with a bound of 2), yet the float fallback over its model met the bound with 6 of
    51 units in float (x1.76 over FP32) where over the plain ``mixed`` model it needed 43 (no faster than FP32)."""
    if FULL_BIAS_CORRECTION not in label:
        return lambda scored: None
    plain = variants[0][0]  # option_variants' first is the base the other options add to (NNCF's or transformer's)
    with_mixed = label.startswith("preset mixed")

    def skip(scored: dict) -> str | None:
        a, m = scored.get(plain), scored.get(MIXED)
        if a is None or m is None or a.search_value is None or m.search_value is None:
            return None
        if with_mixed and a.search_value >= m.search_value:
            return f"preset mixed scored no better than '{plain}' ({m.search_value:.4g} vs {a.search_value:.4g})"
        if not with_mixed and m.search_value > a.search_value:
            return f"'{plain}' scored below preset mixed ({a.search_value:.4g} vs {m.search_value:.4g})"
        return None

    return skip


BYPASS_LIMIT = 24  # more units than this: one compile for all (local error), not one each
BYPASS_METHOD = ("output error (1 - cosine) vs FP32 saved by making only that unit float (its activation quantizer "
                 "removed, its readers' FP32 weights put back) in the INT8 model, on {n} search samples; ranked once")



def _error(reference: list[dict], got: list[dict]) -> float:
    from edgeopt.converters.quantize.sensitivity import output_error

    return output_error(reference, got)


def search_nncf(nncf, ov_model, calib, common: dict, *, fp32_run, out_names: list[str], search, confirm,
                bound: float, budget_s: float, progress=None, threads: int | None = None,
                rank_samples: int = 16, on_rank: Callable | None = None, metric_spec=None,
                search_path=(), precision: str = "f32", confidence: float | None = None, looks=None) -> SearchResult:
    """The budgeted search over ``nncf.quantize``; candidates' artifacts are the quantized OV models, each judged
    at ``precision``, the inference precision hint the artifact will run with (an NPU profile's f16)."""
    from edgeopt.quant_units import units_of

    s = _NncfSearch(nncf, ov_model, calib, common, fp32_run=fp32_run, out_names=out_names, search=search,
                    threads=threads, rank_samples=rank_samples, on_rank=on_rank, precision=precision)
    # a candidate with every weighted op in float is the FP32 model whatever FakeQuantize it keeps elsewhere
    result = run_search(options=s.options(bound), rank=s.rank, with_float=s.bypassed, fp32_run=fp32_run,
                        search=search, confirm=confirm, bound=bound, budget_s=budget_s, progress=progress,
                        what="INT8 search (openvino/nncf)", sensitivity_method="see sensitivity.method_used",
                        metric_spec=metric_spec, search_path=search_path, quantizes=lambda q: units_of(q)[0] > 0,
                        looks=looks,
                        **({} if confidence is None else {"confidence": confidence}))
    result.report["transformer_options"] = s.transformer
    result.report.update(judged_at(precision))
    if "sensitivity" in result.report:
        result.report["sensitivity"]["method"] = s.ranking_method
    chosen = next((i for i, (label, _) in enumerate(s.variants)
                   if label == result.report["quantizer_options"]["chosen"]), 0)
    if result.best is not None and result.best.kept:
        cheaper_float(result, s.units_for(s.fq_owner[chosen]), lambda kept: s.bypassed(chosen, kept),
                      lambda q: units_of(q)[0] > 0, search, confirm, bound)
    result.report.update(s.kept_report(result, chosen))
    if result.best is not None and result.best.kept:
        _final_build(result, s.with_float(chosen, result.best.kept), search, confirm, bound)
    return result


class _NncfSearch:
    """What the search over ``nncf.quantize`` builds and remembers: each option's INT8 model (``fq_owner``), its
    units, the ranking of them, and the float weights put back for each candidate."""

    def __init__(self, nncf, ov_model, calib, common: dict, *, fp32_run, out_names, search, threads, rank_samples,
                 on_rank, precision: str = "f32"):
        import openvino as ov

        self.nncf, self.ov_model, self.calib, self.common = nncf, ov_model, calib, common
        self.fp32_run, self.out_names, self.search, self.threads = fp32_run, out_names, search, threads
        self.rank_samples, self.on_rank, self.precision = rank_samples, on_rank, precision
        self.core = ov.Core()
        self.in_names = [p.get_any_name() for p in ov_model.inputs]
        self.transformer = looks_like_transformer(ov_model)
        self.variants = heads_first(nncf, option_variants(nncf, common, self.transformer,
                                                          types_without_weights(ov_model)), output_heads(ov_model))
        self.units_of: dict[int, FloatUnits] = {}  # option index -> its INT8 model's units
        self.fq_owner: dict[int, object] = {}  # option index -> its INT8 model
        self.ranking_method = BYPASS_METHOD.format(n=min(rank_samples, len(search)))
        self.weights_back: dict[tuple[int, tuple[str, ...]], int] = {}

    def _compiled(self, q):
        return compiled_run(self.core, q, self.in_names, self.out_names, self.threads, precision=self.precision)

    def build(self, kw: dict) -> Callable:
        def go():
            q = self.nncf.quantize(self.ov_model, self.calib, **kw)
            return q, self._compiled(q)
        return go

    def options(self, bound: float) -> list[tuple[str, Callable]]:
        """``run_search``'s options: each NNCF variant, its INT8 model remembered for the float fallback."""
        out = []
        for i, (label, kw) in enumerate(self.variants):
            def remember(i=i, kw=kw):
                q, run = self.build(kw)()
                self.fq_owner[i] = q
                return q, run
            remember.skip_when = skip_option(label, self.variants, bound)
            out.append((label, remember))
        return out

    def units_for(self, q) -> FloatUnits:
        i = next((j for j, m in self.fq_owner.items() if m is q), None)
        if i is None:
            return FloatUnits(q, self.ov_model)
        return self.units_of.setdefault(i, FloatUnits(q, self.ov_model))

    def rank(self, q, deadline: float) -> list[tuple[str, float]]:
        """The units of ``q``, most helpful to make float first (see the module doc)."""
        if self.on_rank is not None:
            self.on_rank()
        feeds = self.search.feeds(min(self.rank_samples, len(self.search)))
        quantizers = activation_quantizers(q)
        units = self.units_for(q)
        if len(quantizers) > BYPASS_LIMIT:
            self.ranking_method = LOCAL_METHOD
            return local_error_ranking(units, feeds, self.in_names, self.core, self.threads)
        reference = [self.fp32_run(f) for f in feeds]
        run_q = self._compiled(q)
        base_err = _error(reference, [run_q(f) for f in feeds])
        scores = []
        for name in quantizers:
            if time.perf_counter() > deadline:  # out of time: the rest keep graph order, after the ranked ones
                scores.append((name, UNRANKED))
                continue
            qc, _ = units.apply([name])
            run = self._compiled(qc)
            scores.append((name, base_err - _error(reference, [run(f) for f in feeds])))
        scores.sort(key=lambda t: -t[1])
        return scores

    def bypassed(self, i: int, kept: tuple[str, ...]) -> Callable:
        """Option ``i``'s INT8 model with the ``kept`` units float in place: no recalibration, one compile."""
        def go():
            qc, restored = self.units_for(self.fq_owner[i]).apply(kept)
            self.weights_back[(i, tuple(kept))] = restored
            return qc, self._compiled(qc)
        return go

    def with_float(self, i: int, kept: tuple[str, ...]) -> Callable:
        """Option ``i`` rebuilt by ``nncf.quantize`` with the ``kept`` units' ops in ``ignored_scope``."""
        kw = dict(self.variants[i][1])
        q0 = self.fq_owner.get(i)
        names = sorted({c for fq in kept for c in consumers_to_ignore(q0, fq)}) if q0 is not None else []
        kw["ignored_scope"] = with_ignored(self.nncf, kw.get("ignored_scope"), names=names)  # the option's own kept
        return self.build(kw)

    def kept_report(self, result: SearchResult, chosen: int) -> dict:
        """The units the shown candidate keeps in float (with their ops, float weights and sensitivity)."""
        shown = result.best or result.closest  # what the gate failure names when nothing met the bound
        if not (shown is not None and shown.kept and chosen in self.fq_owner):
            return {"kept_in_float": []}
        q = self.fq_owner[chosen]
        units = self.units_for(q)
        score = dict(result.ranked)
        return {"kept_in_float": [
            {"quantizer": fq, "ops": units.readers(fq),
             "float_weights": [op.get_friendly_name() for op, _, _ in units.weights_of(q, [fq])],
             "sensitivity": round(score.get(fq, 0.0), 6)} for fq in shown.kept],
            "float_weights_restored": self.weights_back.get((chosen, tuple(shown.kept)))}


def _final_build(result: SearchResult, build: Callable, search, confirm, bound: float) -> None:
    """The search's hit is the INT8 model with the chosen units made float in place; rebuild it the proper way
    (``nncf.quantize`` with those ops in ``ignored_scope``: calibration and bias correction made for it)
    when the budget has room for one more quantization, and keep whichever meets the bound on both parts
    (the rebuild when both do)."""
    r = result.report
    option_costs = [t["seconds"] for t in r["tried"] if not t["kept_in_float"]]
    left = r["budget_s"] - r["search_seconds"]
    if not option_costs or left < float(np.mean(option_costs)):
        r["final_build"] = ("the search's model (those units made float in the INT8 model); no time left in the "
                            "budget to rebuild it with ignored_scope")
        return
    t = time.perf_counter()
    q, run = build()
    judged = result.judge(run)  # the one confirmation (converters/quantize/budget.py BudgetedSearch.judge)
    s_val, c_val = judged.search_value, judged.confirm_value
    s_drop = result.m_search.fp32_value - s_val
    c_drop = None if c_val is None else round(result.m_confirm.fp32_value - c_val, 3)  # None: not confirmed
    seconds = time.perf_counter() - t
    r["search_seconds"] = round(r["search_seconds"] + seconds, 2)  # the rebuild is part of the search's time
    entry = {"search_drop_points": round(s_drop, 3), "confirm_drop_points": c_drop, "seconds": round(seconds, 2)}
    if judged.met:
        result.best.artifact = q
        r.update(search_drop_points=round(s_drop, 3), confirm_drop_points=c_drop,
                 search_value=round(s_val, 4), confirm_value=round(c_val, 4))
        r["final_build"] = {"what": "nncf.quantize with those ops in ignored_scope", **entry}
    else:
        r["final_build"] = {"what": "the search's model (those units made float in the INT8 model): "
                                    "nncf.quantize with the same ops in ignored_scope missed the bound", **entry}


def no_int8_holds(result: SearchResult, bound: float, bf16_drop: float | None, device: str = "CPU"):
    """The exit-5 error of a search with no INT8 within the bound (:func:`.search.gate_failure`'s figures), with the
    ways out an OpenVINO build has: ONNX Runtime's own INT8 search, or a float precision (bf16 where this CPU runs it
    natively, with its drop on the held-out part; the x86 profiles have no float fallback of their own). For a
    ``device`` other than the CPU (an NPU profile's f16), the message says at which precision this CPU judged it
    when that is not the device's own, and the hint names the build for the laptop's CPU."""
    err = gate_failure("openvino", result, bound)
    hint, ran = result.report.get("judged_at_hint", "f32"), result.report.get("cpu_ran_it_as")
    if ran:
        err.message += (f" (judged at the {device}'s {hint} precision hint, which this CPU runs as {ran}; the {device} "
                        f"itself computes in {hint})")
    floats = "--precision fp32"
    if bf16_drop is not None:
        floats += f" or --precision bf16 (native here: drop {bf16_drop:.2f} points on the held-out part)"
    budget = "raise --search-budget, " if result.report.get("stopped_by_budget") else ""
    if device != "CPU":
        err.hint = (f"{budget}build for the CPU instead of the {device} (--set openvino.device=CPU --set "
                    f"openvino.inference_precision=f32), relax --max-accuracy-drop, or check on the {device} itself "
                    f"(--precision fp16, then edgeopt remote-bench)")
        return err
    err.hint = (f"{budget}try --backend onnxruntime (its own INT8 search), relax --max-accuracy-drop, or keep float: "
                f"{floats}")
    return err
