"""Task metrics that fit the model's output, always named.

:func:`make_metric` looks at FP32's output on the data (its shape, its values) and at the labels the user
gave, and picks (unless :class:`MetricSpec` names one):

* ``top1``: an ``[N,C]`` classifier: top-1 accuracy with labels, else top-1 agreement with FP32 (a one-value
  output: the decision at ``threshold``);
* ``position_agreement``: ``[N,T,C]`` sequences (class axis last), ``[N,C,H,W]`` segmentation (class axis 1),
  frame-wise audio: argmax along the class axis, averaged over positions (``axis`` when it can't be told);
* ``ctc``: exact match of greedy CTC decoding (``ctc_blank``) vs label sequences, or vs FP32's decoding;
  chosen automatically for an ``[N,T,C]`` output when the labels are padded sequences (``-1`` padding), or,
  without labels, when FP32's argmax is the blank at half the positions or more (CTC's peaky output), or on
  dense lines at a quarter or more while the blank leads every class by far and characters last about one frame
  (:func:`looks_like_ctc`);
* ``map_iou``: one-channel maps with values in [0, 1]: IoU of the maps thresholded at ``threshold``; against
  FP32, over the cells where FP32 is sure (``base.unsure_band``: not within 0.1 of the threshold);
* ``cosine`` (%, vs FP32) and ``sqnr`` (dB, vs FP32) for regression/embeddings (judged by cosine
  automatically without labels: outputs named like embeddings/hidden states, and any output whose rows have
  unit L2 norm, whatever its name; cosine to FP32 is a proxy for the task's own figure); ``--min-sqnr-db``
  alone picks ``sqnr``;
* ``relative_error`` (:mod:`.regression`): boxes, landmarks, audio and other regressions: the mean error as % of
  FP32's range; ``ordered_bins`` (:mod:`.ordered_bins`): distributions over ordered bins (pitch, depth, age): the
  peak's position within a tolerance of bins; ``heatmap_peaks`` (:mod:`.heatmaps`): keypoint heatmaps, each map's
  peak within a tolerance of cells, where FP32's peak is confident; these, and score maps judged where FP32 is
  confident, are told from the output's meaning before the shape rules (:mod:`.choose`);
* ``custom``: ``pkg.module:function`` (:mod:`.custom`);
* ``all_outputs``: every output judged by its own metric above, vs FP32; the worst counts (:mod:`.all_outputs`).
  Chosen automatically for a model with several outputs when nothing else is said (no labels, no metric flag):
  a detector's boxes count as much as its scores.

``OUTPUT=KIND`` (:mod:`.overrides`) sets one output's kind; labels are matched to the output they fit
(:mod:`.label_match`), or to ``--metric-output``.

Every metric is higher-is-better. Its ``drop`` is ``fp32_value - value``: points for % metrics; for ``sqnr``
``fp32_value`` is the target (``min_sqnr_db``, default 30 dB), so the drop is the dB below the target.
"""

from __future__ import annotations

import itertools

import numpy as np

from edgeopt.errors import BadDataError, BadInputError
from edgeopt.metrics.flags import check_metric_flags, declared_kind

from . import labels as lab
from .all_outputs import worst_of
from .base import Metric, MetricName, MetricSpec, sample_of
from .choose import choose_by_meaning, shape_rule_why
from .custom import is_custom
from .kinds import BUILDERS, ctc_decode
from .label_match import chance_pct, labelled_output
from .overrides import check_output_names, split_metric

_EMBEDDING_WORDS = ("embed", "hidden", "pool", "feature", "vector", "encod")


def as_metric_spec(metric) -> MetricSpec | None:
    """A :class:`MetricSpec` from what the API accepts: a spec, a mapping, a name or ``MODULE:FUNCTION``, or None."""
    if metric is None or isinstance(metric, MetricSpec):
        return metric
    return MetricSpec.model_validate(metric) if isinstance(metric, dict) else parse_metric_spec(str(metric))


def parse_metric_spec(name=None, *, axis=None, ctc_blank=None, threshold=None, min_sqnr_db=None,
                      output=None) -> MetricSpec | None:
    """A :class:`MetricSpec` from CLI/API values (None when nothing was given); bad values are exit 2."""
    from pydantic import ValidationError

    from edgeopt.errors import UsageError, did_you_mean

    if isinstance(name, MetricSpec):
        return name
    kinds = None
    if isinstance(name, str) and ("=" in name or not is_custom(name)):  # output names may hold ':' (TF exports)
        name, kinds = split_metric(name)
    given = {"name": name, "axis": axis, "ctc_blank": ctc_blank, "threshold": threshold,
             "min_sqnr_db": min_sqnr_db, "output": output, "kinds": kinds}
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return None
    if isinstance(name, str) and not is_custom(name) and name not in {m.value for m in MetricName}:
        raise UsageError(f"--metric '{name}' is not a metric",
                         did_you_mean(name, [m.value for m in MetricName])
                         or f"one of: {', '.join(m.value for m in MetricName)}, or MODULE:FUNCTION")
    try:
        return MetricSpec(**given)
    except ValidationError as err:
        raise UsageError(f"--metric: {err.errors()[0]['msg']}", "see edgeopt convert --help") from err


def make_metric(fp32_run, dataset, spec: MetricSpec | None = None, *, search_path=None, role: str = "eval") -> Metric:
    """The metric for ``dataset`` (FP32 run once on it); labels are validated here (exit 3 when they can't
    be what the output means, or when FP32 scores at or below chance with them). ``spec`` None: chosen from the
    output and the labels."""
    return metric_for_outputs([fp32_run(feed) for feed in dataset.feeds()], dataset.labels, spec,
                              search_path=search_path, role=role)


CTC_BLANK_SHARE = 0.5  # without labels, [N,T,C] whose argmax is the blank at this share of positions: CTC
# Dense lines (text filling the width) leave the blank under half the frames (PP-OCRv4's recogniser: 0.47-0.53 on
# rendered lines), so a lower share also counts when the output is peaky in CTC's own way: the blank the most
# frequent class by far, and the other classes' runs about one frame long (CTC emits a character at one frame)
CTC_DENSE_BLANK_SHARE = 0.25
CTC_BLANK_LEAD = 4.0  # the blank at least this many times as frequent as the next class
CTC_MAX_MEAN_RUN = 1.5  # frames per run of a non-blank class
CTC_MIN_CLASSES = 20  # an alphabet, not a handful of tags


def _ctc_stats(ref: list[np.ndarray], blank: int) -> tuple[float, float, float]:
    """FP32's argmax over the class axis (last) on up to 32 samples: the blank's share of positions, how many
    times the next most frequent class it is, and the mean length of a run of one non-blank class."""
    rows = [row for y in ref[:32] for row in np.argmax(np.asarray(y), axis=-1).reshape(-1, np.shape(y)[-2])]
    flat = np.concatenate(rows)
    counts = np.bincount(flat, minlength=blank + 1)
    share = float(counts[blank] / flat.size)
    lead = counts[blank] / max(int(np.delete(counts, blank).max(initial=0)), 1)
    runs = [len(list(g)) for row in rows for k, g in itertools.groupby(row.tolist()) if k != blank]
    return share, float(lead), float(np.mean(runs)) if runs else 0.0


def looks_like_ctc(ref: list[np.ndarray], blank: int = 0) -> bool:
    """CTC logits told by FP32's output: the blank at half the positions or more, or (dense lines) at a quarter
    or more while leading every other class by far, with the other classes' runs about one frame long."""
    if np.shape(ref[0])[-1] < CTC_MIN_CLASSES:
        return False
    share, lead, mean_run = _ctc_stats(ref, blank)
    if share >= CTC_BLANK_SHARE:
        return True
    return share >= CTC_DENSE_BLANK_SHARE and lead >= CTC_BLANK_LEAD and mean_run <= CTC_MAX_MEAN_RUN


UNIT_NORM_TOLERANCE = 1e-3


def looks_like_embedding(ref: list[np.ndarray]) -> bool:
    """An embedding told by its values, whatever its output is named (``304`` after a torch export): float
    vectors of at least 8 values whose rows all have unit L2 norm (an L2-normalised embedding, as speaker
    encoders and sentence embedders end), never a probability row (non-negative, summing to 1)."""
    first = np.asarray(ref[0])
    if first.dtype.kind != "f" or first.ndim != 1 or first.shape[0] < 8:
        return False
    rows = np.stack([np.asarray(y, np.float64).ravel() for y in ref[:64] if np.shape(y) == first.shape])
    if np.all(rows >= 0) and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3):
        return False
    return bool(np.all(np.abs(np.linalg.norm(rows, axis=1) - 1.0) <= UNIT_NORM_TOLERANCE))


def _auto(shape: tuple, ref: list[np.ndarray], labels, out_name: str | None, ctc_probe: bool,
          blank: int = 0) -> MetricName:
    first = ref[0]
    lower = (out_name or "").lower()
    named_embedding = any(w in lower for w in _EMBEDDING_WORDS)
    if int(np.prod(shape)) == 1:  # one value per sample, whatever its rank ([N,1,1,1]): a decision, no embedding
        return MetricName.TOP1
    if len(shape) <= 1:
        if labels is None and shape and shape[0] > 1 and (named_embedding or looks_like_embedding(ref)):
            return MetricName.COSINE
        return MetricName.TOP1
    if named_embedding and labels is None:
        return MetricName.COSINE
    if len(shape) == 3 and (shape[0] == 1 or shape[-1] == 1):  # [N,1,H,W] / [N,H,W,1]
        if np.all((first >= 0) & (first <= 1)):
            return MetricName.MAP_IOU
        return MetricName.COSINE
    if len(shape) == 2 and labels is not None:
        arr = labels if isinstance(labels, np.ndarray) else None
        if arr is None or arr.dtype.kind == "O" or (arr.ndim == 2 and arr.shape[1] != shape[0]):
            return MetricName.CTC  # sequences of their own length (-1 padded): CTC, not one label per position
    if len(shape) == 2 and labels is None and shape[0] >= 8 and shape[1] >= 10 and ctc_probe \
            and looks_like_ctc(ref, blank):
        return MetricName.CTC  # a recogniser: lines read as FP32 reads them, not positions (see README 'Metrics')
    return MetricName.POSITION_AGREEMENT


def metric_for_outputs(fp32_outputs: list[dict], labels, spec: MetricSpec | None = None, *,
                       search_path=None, role: str = "eval") -> Metric:
    """The metric from FP32's outputs already computed on the data (see :func:`make_metric`)."""
    spec = spec or MetricSpec()
    n = len(fp32_outputs)
    if n == 0:
        raise BadDataError(f"--{role}: no samples to judge accuracy on", "give at least one sample")
    if labels is not None:
        lab.count_check(labels, n, role)
    check_output_names(spec, list(fp32_outputs[0]))
    if judges_every_output(spec, labels, list(fp32_outputs[0])):
        parts, asked = _output_metrics(fp32_outputs, spec, n, role, search_path), declared_kind(spec) is not None
        if asked and not parts:
            raise BadInputError("--metric all_outputs: no output of the model can be judged by a metric vs FP32 "
                                f"(outputs: {', '.join(fp32_outputs[0])})", "give --metric and --metric-output")
        if len(parts) > 1 or asked:
            return worst_of(parts, fp32_outputs)
    if labels is not None:
        spec = spec.model_copy(update={"output": labelled_output(fp32_outputs, labels, spec, role)})
    out_name = spec.output or next(iter(fp32_outputs[0]))
    ref = [sample_of(o, out_name) for o in fp32_outputs]
    shape = tuple(ref[0].shape)
    kind, why = _kind_of(spec, shape, ref, labels, out_name, fp32_outputs)
    check_metric_flags(spec, kind, shape, out_name)  # a flag that can't apply to this metric: exit 2, never dropped
    build = BUILDERS[kind]
    m = build(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path)
    m.why = why
    if kind != MetricName.SQNR:
        m.fp32_value = m.score_outputs(fp32_outputs)
    m.fp32_rows = m.rows(fp32_outputs)
    _check_chance(m, labels, role)
    return m


def _kind_of(spec: MetricSpec, shape, ref, labels, out_name, fp32_outputs) -> tuple[MetricName, str]:
    """The kind judging ``out_name`` and why: asked (``--metric``, ``OUTPUT=KIND``), else told by what it means."""
    asked = (spec.kinds or {}).get(out_name) or declared_kind(spec)
    if asked is not None:
        return asked, f"'{out_name}': asked (--metric {asked.value})"
    if labels is not None:
        kind = _auto(shape, ref, None if labels is None else labels, out_name, spec.axis is None, spec.ctc_blank)
        return kind, shape_rule_why(kind, shape, out_name) + "; judged with the labels"
    siblings = {k: [sample_of(o, k) for o in fp32_outputs] for k in fp32_outputs[0]} if len(fp32_outputs[0]) > 1 \
        else None
    meant = choose_by_meaning(shape, ref, out_name, siblings)
    if meant is not None:
        return meant
    kind = _auto(shape, ref, None, out_name, spec.axis is None, spec.ctc_blank)
    return kind, shape_rule_why(kind, shape, out_name)


def pinned_spec(spec: MetricSpec | None, chosen) -> MetricSpec:
    """``spec`` with its metric fixed to ``chosen`` (the kind, or the :class:`Metric`, chosen on all the samples):
    parts of the data, or random halves of it, are then scored by the same metric, each output by the same kind
    and the labels on the same output, never by one chosen again on fewer samples."""
    spec = spec or MetricSpec()
    if not isinstance(chosen, Metric):
        return spec.model_copy(update={"name": chosen})
    update: dict = {"name": chosen.kind}
    if chosen.parts:
        update["kinds"] = {**{p.output: p.kind for p in chosen.parts}, **(spec.kinds or {})}
    elif chosen.output is not None and chosen.kind != MetricName.CUSTOM:
        update["output"] = chosen.output
    return spec.model_copy(update=update)


def judges_every_output(spec: MetricSpec | None, labels, output_names: list[str]) -> bool:
    """``--metric all_outputs``, or nothing said about which output is judged (no metric, no ``--metric-output``, no
    labels, which belong to one output; ``OUTPUT=KIND`` overrides may be given) on a model with more than one
    output (``output_names``)."""
    if spec is not None and declared_kind(spec) == MetricName.ALL_OUTPUTS:
        return True
    said = set() if spec is None else spec.model_fields_set - {"kinds"}
    return not said and labels is None and len(output_names) > 1


def _output_metrics(fp32_outputs: list[dict], spec: MetricSpec, n: int, role: str, search_path) -> list[Metric]:
    """Each output's own metric vs FP32 (chosen by what it means, or ``OUTPUT=KIND``); an output no metric fits
    (a state tensor with no class axis) is left out."""
    parts = []
    given = {"threshold": spec.threshold} if "threshold" in spec.model_fields_set else {}  # else each output's own
    plain = MetricSpec(ctc_blank=spec.ctc_blank, kinds=spec.kinds, **given)
    for name in fp32_outputs[0]:
        ref = [sample_of(o, name) for o in fp32_outputs]
        shape = tuple(ref[0].shape)
        kind, why = _kind_of(plain, shape, ref, None, name, fp32_outputs)
        try:
            part = BUILDERS[kind](ref, None, plain, shape, name, n, role, fp32_outputs, search_path)
        except BadInputError:
            if name in (spec.kinds or {}):
                raise
            continue
        part.why = why
        parts.append(part)
    return parts


def _check_chance(m: Metric, labels, role: str) -> None:
    if not m.labels_used or m.kind == MetricName.CUSTOM:
        return
    chance = chance_pct(labels) if m.classes else 0.0
    if m.fp32_value <= chance:
        raise BadDataError(f"your labels don't match the model's outputs: FP32 scores {m.fp32_value:.3g} % "
                           f"{m.name} of output '{m.output}' on --{role} (chance is {chance:.3g} % for the "
                           f"{round(100 / chance) if chance else 0} distinct labels given)",
                           "check the label order/mapping, that the labels belong to these samples, and which "
                           "output they are for (--metric-output)")


__all__ = ["Metric", "MetricName", "MetricSpec", "as_metric_spec", "ctc_decode", "judges_every_output", "make_metric",
           "metric_for_outputs", "parse_metric_spec"]
