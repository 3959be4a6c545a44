"""How each metric kind scores a candidate's outputs against FP32's outputs or the labels."""

from __future__ import annotations

import math

import numpy as np

from edgeopt.errors import BadInputError

from . import labels as lab
from .base import UNSURE_BAND, Metric, MetricName, class_axis, decision_cut, sample_of, unsure_band
from .custom import load_callable, scorer
from .heatmaps import heatmap_metric
from .ordered_bins import ordered_bins_metric
from .regression import relative_error_metric

DEFAULT_SQNR_TARGET_DB = 30.0
SQNR_CEILING_DB = 200.0  # identical outputs (FP32 against itself) score this instead of infinity


def _pct(values) -> float:
    return float(100.0 * np.mean(values)) if len(values) else 0.0


def cosine(a, b) -> float:
    """Cosine similarity of two outputs (flattened, in float64): 1.0 when both are zero, 0.0 when only one is.
    The one definition: the ``cosine`` metric and the stages' numeric checks (``converters/checks.py``) use it."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 1.0 if na == nb == 0 else float(a @ b / (na * nb)) if na and nb else 0.0


def top1_class(y) -> int:
    """The top-1 class of one sample's scores (argmax over its values). The one definition: the ``top1`` metric
    and the stages' top-1 agreement (``converters/checks.py``) use it."""
    return int(np.argmax(np.ravel(y)))


def _top1(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    from .choose import is_distribution

    binary = len(shape) == 0 or int(np.prod(shape)) == 1
    classes = 2 if binary else int(np.prod(shape))
    threshold = spec.threshold
    if binary and "threshold" not in spec.model_fields_set and not is_distribution(ref):
        threshold = 0.0  # a logit (FP32's values leave [0, 1]) decides at 0, a probability at 0.5

    def pred(y) -> int:
        return int(np.ravel(y)[0] > threshold) if binary else top1_class(y)

    def preds(samples):
        return np.asarray([pred(y) for y in samples], np.int64)

    target = preds(ref) if labels is None else lab.class_indices(labels, n, classes, role=role)
    base = f"decision_at_{threshold:g}" if binary else "top1"
    name = f"{base}_accuracy" if labels is not None else f"{base}_agreement_with_fp32"
    what = f"decision (output > {threshold:g})" if binary else "top-1 class"
    desc = (f"% of samples whose {what} matches the label" if labels is not None
            else f"% of samples whose {what} matches FP32's (no labels)")
    def right(got):
        return 100.0 * (np.asarray(got, np.int64) == target)

    return Metric(MetricName.TOP1, name, desc, "%", out_name, labels is not None, n,
                  lambda got: _pct(np.asarray(got, np.int64) == target), classes=classes,
                  digest=lambda o: pred(sample_of(o, out_name)), per_sample=right)


def _positions(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    if len(shape) < 2:
        raise BadInputError(f"--metric position_agreement needs an output with positions ([N,T,C], [N,C,H,W]); "
                            f"output '{out_name}' is [N,{','.join(map(str, shape))}]", "use --metric top1")
    axis = class_axis(shape, spec, out_name)
    pos_shape = tuple(d for i, d in enumerate(shape) if i != axis)

    def preds(samples):
        return np.stack([np.argmax(y, axis=axis) for y in samples])

    target = preds(ref) if labels is None else lab.class_indices(labels, n, shape[axis], role=role, positions=pos_shape)
    valid = target != -1
    maps = labels is None and len(shape) == 3  # a segmentation map: judged off the background (class 0)

    def score(got):
        g = np.stack(got)
        if maps:
            fg = (target != 0) | (g != 0)
            return _pct((g == target)[fg]) if fg.any() else 100.0
        return _pct((g == target)[valid])

    def per_sample(got):  # [matching positions, judged positions] per sample: pooled like score
        g = np.stack(got)
        judged = ((target != 0) | (g != 0)) if maps else valid
        hit = (g == target) & judged
        return np.stack([hit.reshape(n, -1).sum(1), judged.reshape(n, -1).sum(1)], axis=1).astype(np.float64)

    def pooled(rows):  # score's figure: a map all background in both, everywhere, agrees (100)
        return _pooled_pct(rows) if not maps or np.sum(rows[:, 1]) else 100.0

    where = f"along axis {axis + 1} of [N,{','.join(map(str, shape))}]"
    name = "per_position_accuracy" if labels is not None else "per_position_agreement_with_fp32"
    desc = (f"% of positions whose argmax {where} matches the " + ("label" if labels is not None else "FP32 argmax"))
    if maps:
        desc += ", among the positions either calls other than class 0 (the background left out)"
    return Metric(MetricName.POSITION_AGREEMENT, name, desc, "%", out_name, labels is not None, n, score,
                  classes=shape[axis], digest=lambda o: np.argmax(sample_of(o, out_name), axis=axis),
                  per_sample=per_sample, aggregate=pooled)


def ctc_decode(y: np.ndarray, axis: int, blank: int) -> tuple[int, ...]:
    """Greedy CTC: argmax per position, repeats collapsed, blanks removed."""
    best = np.argmax(y, axis=axis).ravel()
    keep = np.concatenate([[True], best[1:] != best[:-1]]) & (best != blank)
    return tuple(int(v) for v in best[keep])


def _ctc(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    axis = class_axis(shape, spec, out_name) if len(shape) != 2 or spec.axis is not None else 1
    classes = shape[axis]
    if not 0 <= spec.ctc_blank < classes:
        raise BadInputError(f"--ctc-blank {spec.ctc_blank} is not a class of output '{out_name}' ({classes} classes)",
                            "the blank is usually 0 (PaddleOCR) or the last class")

    def decode(outs):
        return [ctc_decode(sample_of(o, out_name), axis, spec.ctc_blank) for o in outs]

    target = decode(fp32_outputs) if labels is None else lab.sequences(labels, n, classes, spec.ctc_blank, role=role)
    name = "ctc_exact_match" if labels is not None else "ctc_exact_match_vs_fp32"
    desc = (f"% of samples whose greedy CTC decoding (blank {spec.ctc_blank}) equals the "
            + ("label sequence" if labels is not None else "FP32 decoding"))
    def right(got):
        return 100.0 * np.asarray([a == b for a, b in zip(got, target, strict=True)], np.float64)

    return Metric(MetricName.CTC, name, desc, "%", out_name, labels is not None, n,
                  lambda got: _pct([a == b for a, b in zip(got, target, strict=True)]),
                  digest=lambda o: ctc_decode(sample_of(o, out_name), axis, spec.ctc_blank), per_sample=right)


def _iou(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    """IoU of the thresholded maps; against FP32, only over the cells where FP32 is sure (outside
    :func:`~.base.unsure_band`): a cell FP32 puts at 0.51 is no error of a candidate that puts it at 0.49."""
    t = spec.threshold
    probs = all(np.all((y >= 0) & (y <= 1)) for y in ref)
    cut = decision_cut(t, probs)
    target = [y > cut for y in ref] if labels is None else list(lab.masks(labels, n, shape, t, role=role))
    if labels is None:
        lo, hi = unsure_band(t, probs)
        sure = [(y <= lo) | (y >= hi) for y in ref]
    else:
        sure = [True] * n

    def per_sample(got):
        vals = []
        for p, m, s in zip(got, target, sure, strict=True):
            union = np.sum((p | m) & s)
            vals.append(np.sum(p & m & s) / union if union else 1.0)
        return 100.0 * np.asarray(vals, np.float64)

    def score(got):
        return float(np.mean(per_sample(got))) if len(got) else 0.0

    name = f"map_iou_at_{t:g}" + ("" if labels is not None else "_vs_fp32")
    desc = f"mean IoU of the maps thresholded at {t:g} vs " + ("the label masks" if labels is not None else "FP32's")
    desc += "" if probs else f" (logits: {t:g} of their sigmoid)"
    if labels is None:
        desc += f", over the cells where FP32 is sure (not within {UNSURE_BAND:g} of {t:g} in probability)"
    return Metric(MetricName.MAP_IOU, name, desc, "%", out_name, labels is not None, n, score,
                  digest=lambda o: sample_of(o, out_name) > cut, per_sample=per_sample)


def _cosine(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    def score(got):
        return _pct([cosine(y, r) for y, r in zip(got, ref, strict=True)])

    def per_sample(got):
        return 100.0 * np.asarray([cosine(y, r) for y, r in zip(got, ref, strict=True)], np.float64)

    return Metric(MetricName.COSINE, "cosine_vs_fp32", "mean cosine similarity to FP32's output, in % "
                  "(labels not used; a proxy for an embedding's task figure, e.g. verification accuracy: "
                  "give --metric MODULE:FUNCTION for that)", "%", out_name, False, n, score,
                  digest=lambda o: sample_of(o, out_name), per_sample=per_sample)


def _sqnr(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    target = DEFAULT_SQNR_TARGET_DB if spec.min_sqnr_db is None else float(spec.min_sqnr_db)

    def per_sample(got):  # [signal energy, noise energy] per sample: pooled like score
        rows = []
        for y, r in zip(got, ref, strict=True):
            r64 = np.asarray(r, np.float64)
            rows.append((float(np.sum(r64 ** 2)), float(np.sum((np.asarray(y, np.float64) - r64) ** 2))))
        return np.asarray(rows, np.float64).reshape(-1, 2)

    def score(got):
        return _sqnr_db(per_sample(got))

    m = Metric(MetricName.SQNR, "sqnr_db_vs_fp32", f"signal-to-quantization-noise ratio vs FP32's output in dB; "
               f"the reference is the {target:g} dB target, so the drop is the dB below it (labels not used)",
               "dB", out_name, False, n, score, digest=lambda o: sample_of(o, out_name), per_sample=per_sample,
               aggregate=_sqnr_db, fp32_is_target=True)
    m.fp32_value = target
    return m


def _sqnr_db(rows: np.ndarray) -> float:
    """SQNR of per-sample [signal, noise] energies, pooled over the samples."""
    sig, noise = float(np.sum(rows[:, 0])), float(np.sum(rows[:, 1]))
    if noise == 0:
        return SQNR_CEILING_DB
    return min(SQNR_CEILING_DB, 10.0 * math.log10(sig / noise)) if sig > 0 else -SQNR_CEILING_DB


def _pooled_pct(rows: np.ndarray) -> float:
    """% of per-sample [hits, total] rows, pooled over the samples."""
    total = float(np.sum(rows[:, 1]))
    return 100.0 * float(np.sum(rows[:, 0])) / total if total else 0.0


def _custom(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    fn = load_callable(spec.custom, search_path)
    unit = str(getattr(fn, "unit", ""))
    return Metric(MetricName.CUSTOM, f"custom:{spec.custom}", f"the user's metric {spec.custom} (higher is better)",
                  unit, out_name, labels is not None, n, scorer(fn, spec.custom, labels, fp32_outputs, role))


BUILDERS = {MetricName.TOP1: _top1, MetricName.POSITION_AGREEMENT: _positions, MetricName.CTC: _ctc,
             MetricName.MAP_IOU: _iou, MetricName.COSINE: _cosine, MetricName.SQNR: _sqnr,
             MetricName.CUSTOM: _custom, MetricName.RELATIVE_ERROR: relative_error_metric,
             MetricName.ORDERED_BINS: ordered_bins_metric, MetricName.HEATMAP_PEAKS: heatmap_metric}

