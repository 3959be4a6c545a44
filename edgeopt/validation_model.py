"""The validation's result: :class:`Validation` (what ``edgeopt.validate`` measures, stored as the manifest's
``validation``), its gates, where it ran, :func:`counted_drop`, the one rule for the drop the gates count, and
:func:`within_bound`, the one rule for when a drop is within ``--max-accuracy-drop``: its upper confidence limit at
``--confidence`` (:mod:`edgeopt.metrics.confidence`; the convert gate and every INT8 search judge by it), and
:func:`holds_bound`, that rule on a validation; :func:`eval_too_small`, the refusal of an eval set too small to
confirm any INT8 at that confidence, with the number of samples it needs.

A small module without numpy or runtimes, so :mod:`edgeopt.artifact` can type ``Manifest.validation`` with it;
:mod:`edgeopt.validate` re-exports these names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float
    value: float | None
    passed: bool


class CheckedOn(BaseModel):
    """Where the artifact was validated: the provider that ran it here and the one it is built for (ONNX Runtime's
    runner records both); ``why`` says why they differ (e.g. no TensorRT on this machine), None when they don't."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    target: str
    why: str | None = None


class Validation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    samples: int
    data_source: str  # "eval", "calib-holdout" or "synthetic"
    synthetic: bool
    cosine_min: float | None = None
    cosine_mean: float | None = None
    max_abs_err: float | None = None
    top1_agreement: float | None = None
    accuracy_reference: float | None = None  # top-1 %, FP32 reference in ONNX Runtime
    accuracy: float | None = None  # top-1 %, the artifact
    accuracy_drop: float | None = None  # points
    metric: str | None = None  # the task metric's name, e.g. "ctc_exact_match_vs_fp32"
    metric_kind: str | None = None  # its kind (edgeopt.metrics.MetricName), e.g. "ctc": to judge other data alike
    metric_description: str | None = None
    metric_unit: str | None = None  # "%" or "dB"
    metric_basis: str | None = None  # "labels" or "fp32"
    metric_reference: float | None = None  # FP32 in ONNX Runtime (for sqnr: the target in dB)
    metric_value: float | None = None  # the artifact
    metric_drop: float | None = None  # reference - value
    # each judged output: {output, kind, metric, why, reference, value, drop} (several for all_outputs)
    metric_outputs: list[dict] | None = None
    # compute units of the artifact's model: {"quantized", "float", "file"} (edgeopt.quant_units); None: not read
    units: dict | None = None
    checked_on: CheckedOn | None = None  # the runner's provider vs the artifact's (None: the runner records none)
    # points one sample is worth for a metric that counts samples (top-1, CTC exact match): the room the
    # max_accuracy_drop gate keeps under the bound (within_bound); None: a metric averaged within samples
    sample_points: float | None = None
    # for a metric that doesn't count samples: its drop at the 90th percentile of random halves of the samples
    # (edgeopt.metrics.halves), which must be within the bound too; None: a counted metric, or too few samples
    halves_drop_p90: float | None = None
    # the upper confidence limit of the drop (edgeopt.metrics.confidence) at ``confidence``: what the
    # max_accuracy_drop gate judges; None: not computed (a user's metric, or an eval set too small for a float one)
    drop_upper: float | None = None
    confidence: float | None = None
    gates: dict[str, Gate] = {}
    # a user metric's calls and seconds in this validation ({"calls", "seconds"}; None: none was called): said by
    # the run that validated, not kept in the manifest (seconds differ between runs)
    metric_time: dict | None = Field(default=None, exclude=True)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates.values())


def counted_drop(v: Validation | dict | None) -> tuple[float | None, bool]:
    """The one rule for the drop ``--max-accuracy-drop`` counts (the convert gate, the pipeline's gate,
    ``optimize``): against labels when the eval data has them, else the task metric's drop vs FP32 on real data
    (as the INT8 searches judge it), never on synthetic inputs (None). ``v``: a Validation or its JSON (None: not
    validated). Returns (drop, whether it is vs FP32)."""
    if v is None:
        return None, False
    get = v.get if isinstance(v, dict) else (lambda key: getattr(v, key))
    if get("accuracy_drop") is not None:
        return get("accuracy_drop"), False
    if get("synthetic") or get("metric_drop") is None:
        return None, False
    return get("metric_drop"), True


# ---------------------------------------------------------------------------------------------- the bound


def sample_points(metric_kind, unit: str | None, samples: int) -> float | None:
    """Points of the metric one sample is worth, for a % metric that counts samples right or wrong (top-1
    accuracy or agreement, a decision, CTC exact match): 100/n. None for metrics averaged within each sample
    (per-position agreement, map IoU, cosine, SQNR) or a user's own, where one sample moves the figure by
    less and by an amount the figure alone doesn't tell."""
    # imported here: edgeopt.metrics needs numpy, which artifact.py (typing the manifest with this module) doesn't
    from edgeopt.metrics.base import COUNTED_KINDS

    if metric_kind not in COUNTED_KINDS or unit != "%" or samples <= 0:
        return None
    return 100.0 / samples


def within_bound(drop: float | None, bound: float, points: float | None = None, upper: float | None = None) -> bool:
    """The one rule for "within ``--max-accuracy-drop``" (the convert gate, and each INT8 search's confirmation):
    the upper confidence limit of the drop, ``upper`` (:func:`edgeopt.metrics.confidence.drop_upper`: Tango's paired
    score limit for a metric that counts samples, a seeded bootstrap for the others), is within the bound.

    Without a confidence limit (a user's metric with no per-sample scores, a float artifact judged on an eval set
    too small for any confidence): ``drop <= max(0, bound - points)``, ``points`` being one sample's worth
    (:func:`sample_points`); where one sample is worth the bound or more, only no drop at all is within it.

    Why one sample of room: a counted metric moves in steps of 100/n, and a candidate accepted at the bound is
    one sample away from being over it on the next n samples; with few samples that step is the size of the
    bound itself (on 33 samples one sample is 3 points), so a candidate can pass a small held-back part by luck
    and miss on data it never saw (the device matrix's misses: silero VAD 1.61 points on its 249 eval samples,
    2.01 on 249 others). Keeping one step of room asks the drop to hold even if one more sample flipped."""
    if drop is None:
        return False
    if upper is not None:
        return upper <= bound + 1e-9
    return drop <= max(0.0, bound - (points or 0.0)) + 1e-9


def holds_bound(v: Validation | None, bound: float) -> bool:
    """Whether a validation's drop (:func:`counted_drop`) is within ``bound`` by :func:`within_bound` (its upper
    confidence limit ``drop_upper`` when measured) and, for a user's metric without per-sample scores, on 9 of 10
    random halves of its samples (``halves_drop_p90``): the rules the INT8 search confirmed its choice by, so the
    gates and ``optimize`` judge an artifact as its search did."""
    drop, _ = counted_drop(v)
    if not within_bound(drop, bound, validation_points(v), v.drop_upper if v is not None else None):
        return False
    return v.halves_drop_p90 is None or v.halves_drop_p90 <= bound + 1e-9


def validation_points(v: Validation | None) -> float | None:
    """One sample's worth (:func:`sample_points`) in a validation's own metric and data (None: not validated)."""
    if v is None or v.samples is None:
        return None
    return sample_points(v.metric_kind, v.metric_unit, v.samples)


def eval_samples_for(held_back: int, fraction: float) -> int:
    """The fewest eval samples whose held-back part (``Dataset.split``: ``n - round(n * fraction)``) has
    ``held_back`` samples."""
    n = max(held_back, int(held_back / max(1e-9, 1.0 - fraction)) - 2)
    while n - int(round(n * fraction)) < held_back:
        n += 1
    return n


def ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 21st."""
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def eval_too_small(metric_name: str | None, held_back: int, bound: float, look_confidence: float,
                   confidence: float, fraction: float, look: int = 1):
    """A :class:`GateFailedError` (exit 5) when ``held_back`` samples can't confirm even a candidate that changes no
    sample's outcome (a metric that counts samples) at ``look_confidence`` (the ``look``-th look's share of
    ``confidence``), naming the samples it needs; None when they can. ``details['samples_needed']``: the eval size."""
    from edgeopt.errors import GateFailedError
    from edgeopt.metrics.confidence import paired_upper, samples_needed

    need = samples_needed(bound, look_confidence)
    if need is not None and held_back >= need:
        return None
    if need is None:
        return GateFailedError(f"--max-accuracy-drop {bound:g}: a drop of 0 can't be confirmed at any confidence "
                               f"({metric_name} counts samples)", "give a bound above 0, e.g. --max-accuracy-drop 1")
    total = eval_samples_for(need, fraction)
    upper = paired_upper(0, 0, held_back, look_confidence)
    return GateFailedError(
        f"too few eval samples to confirm INT8 within --max-accuracy-drop {bound:g} at --confidence {confidence:g}"
        + ("" if look <= 1 else f" on this run's {ordinal(look)} look at them (its searches before, on this backend "
           f"or the ones tried first, looked {'once' if look == 2 else f'{look - 1} times'}, and each look is judged "
           "more strictly)")
        + f": on the {held_back} held-back samples even an INT8 model that changes no sample's {metric_name} could be "
        f"up to {upper:.2f} points worse; confirming needs {need} held-back samples, an --eval set of at least "
        f"{total} samples (--search-fraction {fraction:g})",
        f"nothing was written; give --eval with {total} or more samples, or lower --confidence, or relax "
        "--max-accuracy-drop", details={"samples_needed": total, "held_back_needed": need, "held_back": held_back,
                                        "confidence": confidence, "bound_points": bound, "look": look})


def small_eval_warning(metric_name: str | None, points: float | None, held_back: int, bound: float,
                       look_confidence: float) -> str | None:
    """A warning when the held-back part can confirm a candidate only if it loses no sample at all (a metric that
    counts samples; ``points`` not None): one lost sample already puts the upper confidence limit over the bound.
    Names how many held-back samples would let one lost sample through; None otherwise."""
    from edgeopt.metrics.confidence import paired_upper

    if points is None or bound <= 0 or paired_upper(1, 0, held_back, look_confidence) <= bound + 1e-9:
        return None
    need = held_back
    while paired_upper(1, 0, need, look_confidence) > bound + 1e-9 and need < 10 ** 7:
        need = max(need + 1, int(need * 1.05))
    return (f"{metric_name}: on the {held_back} held-back eval samples an INT8 model that loses one sample and gains "
            f"none can't be confirmed within --max-accuracy-drop {bound:g}; about {need} held-back samples would let "
            "it through (more eval data, or a lower --confidence)")
