"""The ``--max-fallback-ops`` gate of a conversion: the artifact's placement (asked of the runtime, else predicted)
on the stage's report; more ops off the accelerator than allowed fails the conversion (exit 5, naming them)."""

from __future__ import annotations

from pathlib import Path

MAX_FALLBACK_OPS_HELP = ("Most ops allowed off the accelerator (op -> unit placement, asked of the runtime where it is "
                         "here, else predicted from its published op support); default 0 where the backend runs on a "
                         "GPU or NPU, no limit on a CPU")


def gate_placement(model_path: str | Path, backend: str, settings: dict, unit: str, max_ops: int | None,
                   ctx) -> dict | None:
    """Place the written model, put the report on the stage's report, apply the gate: ``max_ops`` (None: 0 on an
    accelerator, no gate on the CPU)."""
    from edgeopt.placement import check_fallback
    from edgeopt.placement.plans import placement_of

    if unit == "cpu" and max_ops is None:
        return None
    report = placement_of(model_path, backend, settings, unit)
    if report is None:
        return None
    limit = 0 if max_ops is None else max_ops
    ctx.stage_report()["placement"] = {**{k: v for k, v in report.items() if k != "ops"}, "max_fallback_ops": limit}
    check_fallback(report, limit)
    return report
