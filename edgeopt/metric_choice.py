"""The task metric a run would judge each output by, and why: what ``convert --dry-run`` shows.

FP32 runs in ONNX Runtime on the first ``SAMPLES`` samples of the data the run validates on, and the metric is
chosen from those outputs as the run chooses it from all of them (:func:`edgeopt.metrics.metric_for_outputs`).
"""

from __future__ import annotations

from pathlib import Path

SAMPLES = 16


def metric_choice(model_path, data, spec=None, search_path=None, threads: int | None = None,
                  role: str = "eval") -> list[dict] | None:
    """Per judged output: ``{output, kind, metric, why}``; None without data."""
    from edgeopt.metrics import metric_for_outputs
    from edgeopt.runtime.run_fn import run_fn

    if data is None or len(data) == 0:
        return None
    part = data.subset(list(range(min(SAMPLES, len(data)))))
    run = run_fn(Path(model_path), threads)
    m = metric_for_outputs([run(feed) for feed in part.feeds()], part.labels, spec, search_path=search_path,
                           role=role)
    return [p.choice() for p in m.parts or [m]]


def describe(choice: list[dict] | None) -> str:
    """The dry run's lines: one per judged output."""
    if not choice:
        return ""
    return "\n".join(["task metric, per output:"] + [f"  {c['output']}: {c['kind']} ({c['metric']}): {c['why']}"
                                                    for c in choice])


def per_output(m, got_outputs: list[dict]) -> list[dict]:
    """Each output the metric ``m`` judges, with FP32's figure, the candidate's (``got_outputs``) and the drop."""
    rows = []
    for p in m.parts or [m]:
        value = p.score_outputs(got_outputs)
        rows.append({**p.choice(), "reference": round(p.fp32_value, 4), "value": round(value, 4),
                     "drop": round(p.fp32_value - value, 4)})
    return rows
