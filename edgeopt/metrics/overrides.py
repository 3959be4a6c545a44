"""``--metric OUTPUT=KIND``: one output's metric kind, the others chosen as usual (comma-separated for several).

``--metric landmarks=relative_error,prob=top1`` or with a metric for the rest:
``--metric all_outputs,boxes=relative_error``. An unknown kind is exit 2 here; an unknown output is exit 2 once
the model's outputs are known (:func:`check_output_names`), each with "did you mean".
"""

from __future__ import annotations

from edgeopt.errors import UsageError, did_you_mean

from .base import MetricName

PER_OUTPUT = tuple(m for m in MetricName if m not in (MetricName.CUSTOM, MetricName.ALL_OUTPUTS))


def split_metric(value: str) -> tuple[str | None, dict[str, MetricName] | None]:
    """``--metric``'s value as (the metric, or None; the per-output kinds, or None)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not any("=" in v for v in items):
        return value, None
    name, kinds = None, {}
    for item in items:
        out, sep, kind = item.partition("=")
        if not sep:
            if name is not None:
                raise UsageError(f"--metric '{value}' names two metrics ('{name}', '{item}')",
                                 "one metric, plus OUTPUT=KIND pairs")
            name = item
            continue
        if not out.strip():
            raise UsageError(f"--metric '{item}' is not OUTPUT=KIND", "e.g. --metric landmarks=relative_error")
        if kind.strip() not in {m.value for m in PER_OUTPUT}:
            raise UsageError(f"--metric {item}: '{kind.strip()}' is not a metric kind of one output",
                             did_you_mean(kind.strip(), [m.value for m in PER_OUTPUT])
                             or f"one of: {', '.join(m.value for m in PER_OUTPUT)}")
        kinds[out.strip()] = MetricName(kind.strip())
    return name, kinds


def check_output_names(spec, output_names: list[str]) -> None:
    """``--metric-output`` and each ``--metric OUTPUT=KIND`` name an output of the model (exit 2 otherwise)."""
    if spec is None:
        return
    asked = ([("--metric-output", spec.output)] if spec.output is not None else []) + \
        [(f"--metric {k}=…", k) for k in (spec.kinds or {})]
    for flag, name in asked:
        if name not in output_names:
            raise UsageError(f"{flag}: the model has no output '{name}' (its outputs: {', '.join(output_names)})",
                             did_you_mean(name, output_names) or "name one of its outputs")
