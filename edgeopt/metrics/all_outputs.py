"""One metric over every output of a multi-output model: each judged by its own metric, the worst one counts.

A detector's outputs are scores and boxes side by side (PicoDet: four score maps and four box distributions);
judging the first alone lets a search quantize everything that feeds only the others, unchecked. Chosen
automatically for a model with more than one output when no labels and no ``--metric-output`` are given, and by
``--metric all_outputs``. Every part is judged against FP32's own output, so each part's FP32 figure is its
ceiling (100 %) and the combined figure is ``100 - the largest part's drop``."""

from __future__ import annotations

import numpy as np

from .base import Metric, MetricName

TOP = 100.0


def worst_of(parts: list[Metric], fp32_outputs: list[dict]) -> Metric:
    """The metric that scores a candidate by its worst part (``parts``: one metric per output, vs FP32)."""
    ceilings = [p.score_outputs(fp32_outputs) for p in parts]
    for p, c in zip(parts, ceilings, strict=True):
        p.fp32_value = c

    def score(digests: list) -> float:
        scores = [p.score_digests([d[i] for d in digests]) for i, p in enumerate(parts)]
        return TOP - max(c - v for c, v in zip(ceilings, scores, strict=True))

    def digest(out: dict) -> tuple:
        return tuple(p.digest(out) for p in parts)

    names = ", ".join(f"'{p.output}' {p.name}" for p in parts)
    m = Metric(MetricName.ALL_OUTPUTS, f"worst_of_{len(parts)}_outputs_vs_fp32",
               f"100 minus the largest drop among the outputs, each judged against FP32 by its own metric: {names}",
               "%", None, False, parts[0].samples, score, digest=digest,
               **_per_sample(parts, ceilings, fp32_outputs))
    m.fp32_value = m.score_outputs(fp32_outputs)
    m.fp32_rows = m.rows(fp32_outputs)  # without them the confidence limit can't be drawn (the point drop alone)
    m.parts, m.why = parts, "several outputs and no labels: each judged by its own kind, the worst drop counts"
    return m


def _per_sample(parts: list[Metric], ceilings: list[float], fp32_outputs: list[dict]) -> dict:
    """``per_sample`` (every part's rows side by side), ``aggregate`` (each part's figure on those rows, the worst
    drop counting) and ``part_columns`` (each part's columns in them) when every part has per-sample scores; empty
    otherwise."""
    if not all(p.per_sample is not None for p in parts):
        return {}
    n = len(fp32_outputs)
    widths = [np.asarray(p.rows(fp32_outputs), np.float64).reshape(n, -1).shape[1] for p in parts]
    cuts = np.cumsum([0, *widths])

    def per_sample(digests: list) -> np.ndarray:
        return np.hstack([np.asarray(p.per_sample([d[i] for d in digests]), np.float64).reshape(len(digests), -1)
                          for i, p in enumerate(parts)])

    def aggregate(rows: np.ndarray) -> float:
        values = []
        for i, p in enumerate(parts):
            part = rows[:, cuts[i]:cuts[i + 1]]
            values.append(p.aggregate(part) if p.aggregate is not None else float(np.mean(part)))
        return TOP - max(c - v for c, v in zip(ceilings, values, strict=True))

    return {"per_sample": per_sample, "aggregate": aggregate,
            "part_columns": [(int(cuts[i]), int(cuts[i + 1])) for i in range(len(parts))]}


def worst_part(metric: Metric, digests: list) -> str:
    """Which output sets an ``all_outputs`` figure on these digests, as "'NAME' METRIC VALUE vs FP32 FIGURE" ("" for
    a metric without parts, or digests of another length)."""
    if not metric.parts or len(digests) != metric.samples:
        return ""
    drops = []
    for i, p in enumerate(metric.parts):
        value = p.score_digests([d[i] for d in digests])
        drops.append((p.fp32_value - value, p, value))
    drop, p, value = max(drops, key=lambda t: t[0])
    unit = f" {p.unit}" if p.unit else ""
    return f"'{p.output}' {p.name} {value:.2f}{unit} vs FP32 {p.fp32_value:.2f}{unit}"
