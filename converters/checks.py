"""Numeric checks of one model against another (every stage uses these); the run functions compared come from
:func:`edgeopt.runtime.run_fn.run_fn`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

RunFn = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def compare(reference: RunFn, candidate: RunFn, feeds: list[dict[str, np.ndarray]]) -> dict:
    """Cosine similarity (min/mean over samples and outputs), max abs error, top-1 agreement of output 0 (its first
    row along the last axis); cosine and the top-1 class are the task metrics' own (:mod:`edgeopt.metrics.kinds`)."""
    from edgeopt.metrics.kinds import cosine, top1_class

    cos, max_abs, agree, n_top1 = [], 0.0, 0, 0
    for feed in feeds:
        ref = reference(feed)
        got = candidate(feed)
        for i, (name, r) in enumerate(ref.items()):
            g = got[name] if name in got else list(got.values())[i]
            g = np.asarray(g, dtype=np.float64).reshape(np.shape(r)) if np.size(g) == np.size(r) else np.asarray(g)
            if not (np.all(np.isfinite(g))):
                cos.append(0.0)
                max_abs = float("inf")
                continue
            cos.append(cosine(r, g))
            max_abs = max(max_abs, float(np.max(np.abs(np.asarray(r, dtype=np.float64) - g))) if np.size(r) else 0.0)
            if i == 0 and np.ndim(r) >= 2 and np.shape(r)[-1] > 1:
                n_top1 += 1
                first_row = (np.asarray(r).reshape(-1, np.shape(r)[-1])[0], g.reshape(-1, np.shape(r)[-1])[0])
                agree += int(top1_class(first_row[0]) == top1_class(first_row[1]))
    return {
        "samples": len(feeds),
        "cosine_min": float(min(cos)) if cos else None,
        "cosine_mean": float(np.mean(cos)) if cos else None,
        "max_abs_err": max_abs,
        "top1_agreement": (agree / n_top1) if n_top1 else None,
    }


def compare_onnx(before: Path | str, after: Path | str, feeds: list[dict[str, np.ndarray]]) -> dict:
    """``compare`` for two ONNX files run in ONNX Runtime."""
    from edgeopt.runtime.run_fn import run_fn

    return compare(run_fn(before), run_fn(after), feeds)
