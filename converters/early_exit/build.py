"""The early-exit stage's work: cuts placed and timed, heads distilled, thresholds chosen and confirmed, the stage
models written; or the plain model and the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.converters.base import ChainContext, Intermediate
from edgeopt.converters.early_exit import cuts as C
from edgeopt.converters.early_exit import heads as H
from edgeopt.converters.early_exit.answers import answers, exit_metric
from edgeopt.converters.early_exit.prefix_cost import REFERENCE, estimated_cost, prefix_cost
from edgeopt.converters.early_exit.thresholds import ExitScores, best_cascade, judge
from edgeopt.enums import Precision
from edgeopt.errors import BadInputError, EdgeoptError
from edgeopt.metrics.base import MetricName

CHECK_SAMPLES = 8  # samples of each stage model's input kept for the backend's checks


def plain(model: Intermediate, ctx: ChainContext, why: str, report: dict) -> Intermediate:
    """The model without exits goes on, and the run says why (like the speed verdict)."""
    report["verdict"] = {"early_exit": False, "why": why}
    ctx.warn(f"early exit: the plain model is written: {why}")
    return model


def _inputs_of(path: Path) -> tuple[list[str], str, object]:
    import onnx

    proto = onnx.load(str(path))
    inits = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    return names, proto.graph.output[0].name, proto


def _scores(feats: H.Features, heads, labels, kind: MetricName) -> ExitScores:
    """Each exit's confidence (its head's max softmax) and answer by the run's metric (``kind``). Ordered bins are
    judged against the full model's positions, as their metric is: the labels are not used."""
    conf, pred = [], []
    for (w, b), pooled in zip(heads, feats.pooled, strict=True):
        p = H.softmax(H.head_logits(pooled, w, b))
        conf.append(p.max(axis=1))
        pred.append(answers(kind, p))
    judged = None if labels is None or kind == MetricName.ORDERED_BINS else np.asarray(labels).ravel()
    return ExitScores(conf, pred, answers(kind, feats.scores), judged, kind)


def _segments(model: Path, inputs, cut_names, output, heads, ranks, raw, first_feed, work, runs):
    """Each segment between cuts extracted and timed, and each head's extra time: (segment ms, head ms)."""
    bounds = [inputs, *[[c] for c in cut_names]]
    seg_ms, head_ms = [], []
    for k in range(len(cut_names) + 1):
        outs = [cut_names[k]] if k < len(cut_names) else [output]
        seg = C.extract(model, work / f"segment{k}.onnx", bounds[k], outs)
        feed = first_feed if k == 0 else {cut_names[k - 1]: raw[k - 1][:1]}
        seg_ms.append(C.time_model(seg, feed, runs))
        if k < len(cut_names):
            headed = C.extract(model, work / f"headed{k}.onnx", bounds[k], outs)
            C.with_head(headed, cut_names[k], ranks[cut_names[k]], *heads[k], prefix=f"exit{k}")
            head_ms.append(max(0.0, C.time_model(headed, feed, runs) - seg_ms[-1]))
    return seg_ms, head_ms


def _segments_of(times: dict, cut_names: list[str]) -> list[float]:
    """Each segment's cost from the prefix costs: the prefix to its cut less the prefix before it (the last: the
    full model less the last prefix)."""
    ends = [times[c] for c in cut_names] + [times["full"]]
    return [max(0.0, b - a) for a, b in zip([0.0, *ends[:-1]], ends, strict=True)]


def _head_costs(model: Path, inputs, cut_names, heads, ranks, prefixes: dict, measure, work: Path) -> list[float]:
    """Each exit head's cost: its prefix with the head less the prefix alone (``prefixes``: the files costed when
    the cuts were placed), both costed together by ``measure``."""
    headed = []
    for k, c in enumerate(cut_names):
        headed.append(C.extract(model, work / f"headed_prefix{k}.onnx", inputs, [c]))
        C.with_head(headed[-1], c, ranks[c], *heads[k], prefix=f"exit{k}")
    ms = measure([*(prefixes[c] for c in cut_names), *headed])
    n = len(cut_names)
    return [max(0.0, with_head - alone) for alone, with_head in zip(ms[:n], ms[n:], strict=True)]


def build_cascade(model: Intermediate, config, ctx: ChainContext) -> Intermediate:
    from edgeopt.converters.early_exit.classifier import classifier_output_of
    from edgeopt.model import graph_outputs

    report = ctx.stage_report()
    work = Path(ctx.work_dir) / "early_exit"
    work.mkdir(parents=True, exist_ok=True)
    inputs, output, proto = _inputs_of(model.path)
    classifier_output_of(graph_outputs(proto))
    candidates = C.cut_candidates(proto)
    report["candidates"] = len(candidates)
    if not candidates:
        return plain(model, ctx, "no tensor alone carries the model's state between blocks (no place to cut)", report)
    ranks = C.value_ranks(proto)
    del proto
    cost = prefix_cost(config, ctx, ctx.calib.feed(0), work)
    try:
        cut_names, times = C.place_cuts(model.path, candidates, config.fractions, work, cost.measure, cost.limit)
    except EdgeoptError as err:  # a prefix the backend can't convert: every prefix estimated instead
        cost = estimated_cost(config, f"could not convert a prefix: {err.message}")
        ctx.warn(f"early exit: the cuts are placed by the {cost.what}")
        cut_names, times = C.place_cuts(model.path, candidates, config.fractions, work, cost.measure, cost.limit)
    report["cuts"] = [{"tensor": t, "prefix_ms": round(times[t], 4),
                       "share_of_time": round(times[t] / times["full"], 3)} for t in cut_names]
    report.update(plain_ms=round(times["full"], 4), cuts_by=config.cuts_by.value, costed_with=cost.what,
                  costs_estimated=cost.estimated,
                  candidate_shares=[round(times[t] / times["full"], 3) for t in C.timed_candidates(candidates, cost.limit)])
    tapped = H.with_outputs(model.path, work / "tapped.onnx", cut_names)
    calib_f, _ = H.compute(tapped, ctx.calib, cut_names, output, ctx.threads)
    _refuse_embedding(calib_f.scores)
    teacher, is_prob = H.as_probabilities(calib_f.scores)
    heads = [H.train_head(p, teacher, config.epochs, config.seed) for p in calib_f.pooled]
    eval_f, raw = H.compute(tapped, ctx.eval, cut_names, output, ctx.threads, keep_raw=CHECK_SAMPLES)
    kind = exit_metric(config.bound.metric, output, eval_f.scores, ctx.eval.labels)
    report["judged_by"] = kind.value
    scores = _scores(eval_f, heads, ctx.eval.labels, kind)
    if cost.what == REFERENCE:
        seg_ms, head_ms = _segments(model.path, inputs, cut_names, output, heads, ranks, raw, ctx.eval.feed(0),
                                    work, config.timing_runs)
    else:  # costed as the prefixes were: each segment from them, each head on its prefix
        seg_ms, head_ms = _segments_of(times, cut_names), _head_costs(model.path, inputs, cut_names, heads, ranks,
                                                                      C.prefix_paths(candidates, cost.limit, work),
                                                                      cost.measure, work)
    report.update(segment_ms=[round(t, 4) for t in seg_ms], head_ms=[round(t, 4) for t in head_ms])
    return _decide(model, config, ctx, report, scores, seg_ms, head_ms, times["full"],
                   dict(tapped=tapped, cut_names=cut_names, heads=heads, ranks=ranks, inputs=inputs, output=output,
                        probabilities=is_prob, work=work, kind=kind))


def _refuse_embedding(scores: np.ndarray) -> None:
    from edgeopt.metrics import looks_like_embedding

    if looks_like_embedding(list(scores[:64])):
        raise BadInputError("--early-exit needs class scores; this output's rows have unit norm (an embedding)",
                            "use --early-exit off for this model")


def _split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.random.default_rng(seed).permutation(n)
    k = int(round(n * fraction))
    return np.sort(idx[:k]), np.sort(idx[k:])


def _decide(model, config, ctx, report, scores, seg_ms, head_ms, plain_ms, parts) -> Intermediate:
    drop, dis, level = config.drop(), config.max_disagreement(), config.exit_confidence
    search, held = _split(len(scores.full), config.bound.search_fraction, config.seed)
    confidence = config.bound.confidence  # the convert gate's: the search half is judged by what it will accept
    aim = config.int8_later_aim if config.int8 and model.precision != Precision.INT8 else 1.0
    report["search_aim"] = aim
    best = best_cascade(scores.subset(search), seg_ms, head_ms, drop * aim, dis * aim, level,
                        exit_cost_ms=config.exit_cost * plain_ms, confidence=confidence, held_n=len(held))
    held_j = judge(scores.subset(held), best["thresholds"], drop, dis, level, confidence)
    report["search"] = _judged_json(best["judged"], len(search))
    report["held_back"] = _judged_json(held_j, len(held))
    report.update(max_accuracy_drop=drop, max_disagreement=dis, exit_confidence=level,
                  disagreement_bound="clopper-pearson" if level is not None else "count",
                  predicted_mean_ms=round(best["mean_ms"], 4),
                  predicted_ratio=round(best["mean_ms"] / plain_ms, 3))
    if not best["enabled"]:
        return plain(model, ctx, "no exit holds the bound and saves time on the search half of --eval", report)
    if best["mean_ms"] > plain_ms * (1 - config.min_gain):
        return plain(model, ctx, f"the exits don't pay for their heads: predicted mean {best['mean_ms']:.3f} ms vs "
                                 f"{plain_ms:.3f} ms plain (measured stage and head times; a gain of at least "
                                 f"{config.min_gain:.0%} is asked)", report)
    if not held_j.holds:
        return plain(model, ctx, f"the thresholds chosen on the search half miss the bound on the held-back half "
                                 f"(drop {held_j.drop:.2f}, up to {held_j.drop_upper:.2f} at {confidence} confidence; "
                                 f"disagreement {held_j.disagreement_bound:.2f} points)",
                     report)
    enabled = list(best["enabled"])
    from edgeopt.converters.early_exit.staged import write_stage_models

    draft = write_stage_models(model.path, ctx, parts, enabled, [best["thresholds"][k] for k in enabled],
                               best["judged"].exit_shares, report)
    # measured once the backend has written the stages (staged.run_staged): in the runtime that ships
    draft.update(model=model.path, tapped=parts["tapped"], report=report, min_gain=config.min_gain,
                 max_drop=drop, confidence=config.bound.confidence, measure_data=ctx.eval.subset(held),
                 stage_ms=_stage_ms(enabled, seg_ms, head_ms))
    report["verdict"] = {"early_exit": True, "exits": len(enabled),
                         "why": f"predicted mean {best['mean_ms']:.3f} ms vs {plain_ms:.3f} ms plain (stage costs: "
                                f"{report['costed_with']}; measured in the backend's runtime next)"}
    return Intermediate(model.path, model.format, model.precision, {**model.notes, "cascade": draft})


def _stage_ms(enabled: list[int], seg_ms: list[float], head_ms: list[float]) -> list[float]:
    """Each cascade stage's measured time: the segments it runs and its exit head (the last: the rest, no head)."""
    out, prev = [], -1
    for k in enabled:
        out.append(round(sum(seg_ms[prev + 1:k + 1]) + head_ms[k], 4))
        prev = k
    return [*out, round(sum(seg_ms[prev + 1:]), 4)]


def _judged_json(j, n: int) -> dict:
    return {"samples": n, "drop_points": round(j.drop, 3), "drop_upper_points": round(j.drop_upper, 3),
            "disagreement_points": round(j.disagreement, 3),
            "disagreement_bound_points": round(j.disagreement_bound, 3),
            "exit_shares": [round(s, 4) for s in j.exit_shares], "holds": j.holds}
