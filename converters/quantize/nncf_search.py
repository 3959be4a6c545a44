"""Accuracy-aware INT8 for OpenVINO: the budgeted search of :mod:`.search` over ``nncf.quantize``.

Options first (NNCF's documented ones: ``fast_bias_correction=False``, preset ``mixed``, and for
attention/MatMul-heavy graphs ``model_type=transformer`` with SmoothQuant on and off), then float
fallback: the activation quantizers (FakeQuantize nodes) of the best option are ranked **once** (by how
much the output error vs FP32 shrinks when only that one is bypassed; past ``BYPASS_LIMIT`` quantizers by
each one's own per-channel error, read in one run), and the candidates are that option's INT8 model with
the top-k quantizers removed (no recalibration: one compile each). The hit is then rebuilt once with
``nncf.quantize`` and the ops reading those quantizers in ``ignored_scope`` (calibration and bias
correction made for it), kept when it also meets the bound on both parts (else the search's model is).
``nncf.quantize_with_accuracy_control`` is not
used: it reverts one group at a time and re-ranks the rest after each step (~40 s a step on a ~50-group
recogniser here), so it does not finish within a budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .search import SearchResult, run_search
from .sensitivity import UNRANKED

# ops a quantizer's value passes through unchanged in NNCF's propagation: follow them to the op that
# really consumes the quantized tensor (its name is what ignored_scope needs)
PASS_THROUGH = {"MaxPool", "AvgPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Split",
                "VariadicSplit", "StridedSlice", "Gather", "Concat", "Pad", "Interpolate", "ReduceMax", "Relu",
                "DepthToSpace", "SpaceToDepth", "ShuffleChannels"}
ATTENTION_HINTS = {"Softmax", "MVN"}


def looks_like_transformer(ov_model) -> bool:
    """MatMul-heavy with attention (Softmax and a MatMul of two activations): NNCF's TRANSFORMER type."""
    types = [op.get_type_name() for op in ov_model.get_ordered_ops()]
    if not (set(types) & ATTENTION_HINTS):
        return False
    act_matmul = any(op.get_type_name() == "MatMul" and all(
        i.get_source_output().get_node().get_type_name() != "Constant" for i in op.inputs())
        for op in ov_model.get_ordered_ops())
    return act_matmul or types.count("MatMul") >= 4


def option_variants(nncf, common: dict, transformer: bool) -> list[tuple[str, dict]]:
    """NNCF's own options, most likely to help first; each a full kwargs dict for ``nncf.quantize``."""
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
    if common.get("preset") != mixed:
        out.append(("preset mixed (asymmetric activations)", dict(common, preset=mixed)))
    # full bias correction runs the model layer by layer: the slowest option, so the last ones
    out.append(("fast_bias_correction=False", dict(common, fast_bias_correction=False)))
    if common.get("preset") != mixed:
        out.append(("preset mixed + fast_bias_correction=False", dict(common, preset=mixed, fast_bias_correction=False)))
    return out


def activation_quantizers(q) -> list[str]:
    return [op.get_friendly_name() for op in q.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]


def consumers_to_ignore(q, fq_name: str) -> list[str]:
    """The ops that read quantizer ``fq_name``'s value (through pass-through ops): ignored_scope names."""
    ops = {op.get_friendly_name(): op for op in q.get_ordered_ops()}
    out, todo, seen = [], [(ops[fq_name], 0)], set()
    while todo:
        node, depth = todo.pop()
        for o in node.outputs():
            for ti in o.get_target_inputs():
                c = ti.get_node()
                name = c.get_friendly_name()
                if name in seen or c.get_type_name() == "Result":
                    continue
                seen.add(name)
                out.append(name)
                if c.get_type_name() in PASS_THROUGH and depth < 4:
                    todo.append((c, depth + 1))
    return out


BYPASS_LIMIT = 24  # more activation quantizers than this: one compile for all (local error), not one each
BYPASS_METHOD = ("output error (1 - cosine) vs FP32 saved by bypassing only that activation quantizer in the INT8 "
                 "model, on {n} search samples; ranked once")
LOCAL_METHOD = ("each activation quantizer's own error on its input, per channel (mean over channels of "
                "|fq(x) - x|^2 / |x|^2, the worse of the channel-first and channel-last readings), read in one run "
                "of the INT8 model with every quantizer's input and output as extra outputs; ranked once")


def local_error_ranking(q, feeds: list[dict], in_names: list[str], core, threads) -> list[tuple[str, float]]:
    """One compile: every FakeQuantize's input and output become model outputs; a quantizer that wipes
    out small channels (outlier activations) scores high even when the big channels dominate the norm."""
    qc = q.clone()
    fqs = [op for op in qc.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]
    n0 = len(qc.outputs)
    for fq in fqs:
        qc.add_outputs([fq.input_value(0), fq.output(0)])
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    compiled = core.compile_model(qc, "CPU", config)
    errs = np.zeros(len(fqs))
    for f in feeds:
        res = compiled({k: v for k, v in f.items() if k in in_names})
        for j in range(len(fqs)):
            x = np.asarray(res[n0 + 2 * j], np.float64)
            y = np.asarray(res[n0 + 2 * j + 1], np.float64)
            errs[j] += _channel_error(x, y) / len(feeds)
    scores = [(fq.get_friendly_name(), float(e)) for fq, e in zip(fqs, errs, strict=True)]
    scores.sort(key=lambda t: -t[1])
    return scores


def _channel_error(x: np.ndarray, y: np.ndarray) -> float:
    if x.ndim < 2:
        return float(np.sum((y - x) ** 2) / (np.sum(x**2) + 1e-12))
    worst = 0.0
    for axis in {1, x.ndim - 1}:
        other = tuple(a for a in range(x.ndim) if a != axis)
        num = np.sum((y - x) ** 2, axis=other)
        den = np.sum(x**2, axis=other)
        live = den > 1e-12 * max(float(den.max()), 1e-30)
        if np.any(live):
            worst = max(worst, float(np.mean(np.minimum(num[live] / den[live], 1.0))))
    return worst


def compiled_run(core, model, in_names: list[str], out_names: list[str], threads: int | None,
                 precision: str = "f32"):
    """A run function over ``model`` compiled for the CPU at ``precision`` (OpenVINO's inference precision hint;
    f32 unless asked, since its default is bf16 where the CPU has it)."""
    config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    compiled = core.compile_model(model, "CPU", config)

    def run(feed):
        res = compiled({k: v for k, v in feed.items() if k in in_names})
        return {name: np.asarray(res[i]) for i, name in enumerate(out_names)}

    run.compiled = compiled
    return run


def _error(reference: list[dict], got: list[dict]) -> float:
    from .sensitivity import output_error

    return output_error(reference, got)


def search_nncf(nncf, ov_model, calib, common: dict, *, fp32_run, out_names: list[str], search, confirm,
                bound: float, budget_s: float, progress=None, threads: int | None = None,
                rank_samples: int = 16, on_rank: Callable | None = None) -> SearchResult:
    """The budgeted search over ``nncf.quantize``; candidates' artifacts are the quantized OV models."""
    import openvino as ov

    core = ov.Core()
    in_names = [p.get_any_name() for p in ov_model.inputs]
    transformer = looks_like_transformer(ov_model)
    variants = option_variants(nncf, common, transformer)

    def build(kw: dict) -> Callable:
        def go():
            q = nncf.quantize(ov_model, calib, **kw)
            return q, compiled_run(core, q, in_names, out_names, threads)
        return go

    def rank(q, deadline: float) -> list[tuple[str, float]]:
        if on_rank is not None:
            on_rank()
        feeds = search.feeds(min(rank_samples, len(search)))
        quantizers = activation_quantizers(q)
        if len(quantizers) > BYPASS_LIMIT:
            ranking_method[0] = LOCAL_METHOD
            return local_error_ranking(q, feeds, in_names, core, threads)
        reference = [fp32_run(f) for f in feeds]
        run_q = compiled_run(core, q, in_names, out_names, threads)
        base_err = _error(reference, [run_q(f) for f in feeds])
        scores = []
        for name in quantizers:
            if time.perf_counter() > deadline:  # out of time: the rest keep graph order, after the ranked ones
                scores.append((name, UNRANKED))
                continue
            qc = q.clone()
            fq = next(op for op in qc.get_ordered_ops() if op.get_friendly_name() == name)
            fq.output(0).replace(fq.input_value(0))
            run = compiled_run(core, qc, in_names, out_names, threads)
            scores.append((name, base_err - _error(reference, [run(f) for f in feeds])))
        scores.sort(key=lambda t: -t[1])
        return scores

    fq_owner: dict[int, object] = {}
    ranking_method = [BYPASS_METHOD.format(n=min(rank_samples, len(search)))]

    def bypassed(i: int, kept: tuple[str, ...]) -> Callable:
        """Option ``i``'s INT8 model with the ``kept`` quantizers removed: no recalibration, one compile."""
        def go():
            qc = fq_owner[i].clone()
            names = set(kept)
            for op in qc.get_ordered_ops():
                if op.get_friendly_name() in names:
                    op.output(0).replace(op.input_value(0))
            return qc, compiled_run(core, qc, in_names, out_names, threads)
        return go

    def with_float(i: int, kept: tuple[str, ...]) -> Callable:
        kw = dict(variants[i][1])
        q0 = fq_owner.get(i)
        names = sorted({c for fq in kept for c in consumers_to_ignore(q0, fq)}) if q0 is not None else []
        names += list(common["ignored_scope"].names) if common.get("ignored_scope") is not None else []
        kw["ignored_scope"] = nncf.IgnoredScope(names=sorted(set(names)), validate=False)
        return build(kw)

    options = []
    for i, (label, kw) in enumerate(variants):
        def remember(i=i, kw=kw):
            q, run = build(kw)()
            fq_owner[i] = q
            return q, run
        options.append((label, remember))
    result = run_search(options=options, rank=rank, with_float=bypassed, fp32_run=fp32_run, search=search,
                        confirm=confirm, bound=bound, budget_s=budget_s, progress=progress,
                        what="INT8 search (openvino/nncf)", sensitivity_method="see sensitivity.method_used")
    result.report["transformer_options"] = transformer
    if "sensitivity" in result.report:
        result.report["sensitivity"]["method"] = ranking_method[0]
    chosen = next((i for i, (label, _) in enumerate(variants) if label == result.report["quantizer_options"]["chosen"]), 0)
    if result.best is not None and result.best.kept and chosen in fq_owner:
        result.report["kept_in_float"] = [{"quantizer": fq, "ops": consumers_to_ignore(fq_owner[chosen], fq),
                                           "error_saved": round(dict(result.ranked).get(fq, 0.0), 6)}
                                          for fq in result.best.kept]
    else:
        result.report["kept_in_float"] = []
    if result.best is not None and result.best.kept:
        _final_build(result, with_float(chosen, result.best.kept), search, confirm, bound)
    return result


def _final_build(result: SearchResult, build: Callable, search, confirm, bound: float) -> None:
    """The search's hit is the INT8 model with the chosen quantizers removed; rebuild it the proper way
    (``nncf.quantize`` with those ops in ``ignored_scope``: calibration and bias correction made for it)
    when the budget has room for one more quantization, and keep whichever meets the bound on both parts
    (the rebuild when both do)."""
    r = result.report
    option_costs = [t["seconds"] for t in r["tried"] if not t["kept_in_float"]]
    left = r["budget_s"] - r["search_seconds"]
    if not option_costs or left < float(np.mean(option_costs)):
        r["final_build"] = ("the search's model (those quantizers removed from the INT8 model); no time left in the "
                            "budget to rebuild it with ignored_scope")
        return
    q, run = build()
    s_val, c_val = result.m_search.score(run, search), result.m_confirm.score(run, confirm)
    s_drop, c_drop = result.m_search.fp32_value - s_val, result.m_confirm.fp32_value - c_val
    entry = {"search_drop_points": round(s_drop, 3), "confirm_drop_points": round(c_drop, 3)}
    if s_drop <= bound and c_drop <= bound:
        result.best.artifact = q
        r.update(search_drop_points=round(s_drop, 3), confirm_drop_points=round(c_drop, 3),
                 search_value=round(s_val, 4), confirm_value=round(c_val, 4))
        r["final_build"] = {"what": "nncf.quantize with those ops in ignored_scope", **entry}
    else:
        r["final_build"] = {"what": "the search's model (those quantizers removed from the INT8 model): "
                                    "nncf.quantize with the same ops in ignored_scope missed the bound", **entry}
