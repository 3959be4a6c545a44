"""The task metric the INT8 search scores candidates by, and its name and unit as the report gives them."""

from __future__ import annotations


def make_task_metric(fp32_run, dataset, spec=None, search_path=()):
    """The task metric for ``dataset`` (``edgeopt.metrics.make_metric``; ``spec``: the stage bound's ``--metric``,
    None: chosen from the output and the data): ``.score(run, ds)``, ``.fp32_value``, ``.name``."""
    from edgeopt.metrics import make_metric

    return make_metric(fp32_run, dataset, spec, search_path=list(search_path))


def replay(outputs: list):
    """A run function that gives ``outputs`` back in order: FP32 run once per sample, scored by several metrics."""
    it = iter(outputs)
    return lambda feed: next(it)


def metric_name(m) -> str:
    return getattr(m, "name", None) or getattr(m, "kind", "metric")


def metric_unit(m) -> str:
    return getattr(m, "unit", "%")
