"""``edgeopt optimize MODEL --profile P --max-accuracy-drop 1``: search the progressive path, keep the fastest."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.chain_flags import chain_option
from edgeopt.cli.options import (
    CalibOption,
    CtcBlankOption,
    MetricAxisOption,
    MetricOption,
    MetricOutputOption,
    MetricThresholdOption,
    MinSqnrOption,
    ProfileOption,
)
from edgeopt.cli.output import JsonOption, emit, stderr


@app.command("optimize")
def optimize_cmd(
    model: Path = typer.Argument(..., help="The ONNX model."),
    profile: str = ProfileOption,
    max_accuracy_drop: float = typer.Option(1.0, "--max-accuracy-drop", help="Bound: most points of the task metric lost."),
    time_budget: float = typer.Option(10.0, "--time-budget", help="Minutes for the search (builds stop after it)."),
    search_budget: float = chain_option("search_budget", context="Each INT8 candidate's search: "),
    calib: Path = CalibOption,
    eval_: Path = typer.Option(None, "--eval", help="Evaluation data with 'labels' (the accuracy bound needs it)."),
    output: Path = typer.Option(None, "--output", "-o", help="Copy the winning artifact here."),
    recipe_out: Path = typer.Option(None, "--recipe-out", help="Winning edgeopt.yaml (default: OUT.edgeopt.yaml)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output."),
    metric: str = MetricOption,
    metric_axis: int = MetricAxisOption,
    ctc_blank: int = CtcBlankOption,
    metric_threshold: float = MetricThresholdOption,
    min_sqnr_db: float = MinSqnrOption,
    metric_output: str = MetricOutputOption,
    json_out: bool = JsonOption,
) -> None:
    """Try fusion, pruning, each INT8 mode and native float precision on each backend; measure each here; keep the
    fastest within the bound."""
    from edgeopt.cli.options import metric_spec
    from edgeopt.errors import GateFailedError
    from edgeopt.optimize.optimizer import optimize
    from edgeopt.optimize.pareto import pareto_text, waterfall_text

    def event(message: str) -> None:
        stderr.print(message, markup=False, highlight=False)

    res = optimize(model, profile, max_accuracy_drop=max_accuracy_drop, time_budget_min=time_budget, calib=calib,
                   eval=eval_, output=output, recipe_out=recipe_out, force=force, on_event=event,
                   search_budget=search_budget,
                   metric=metric_spec(metric, metric_axis, ctc_blank, metric_threshold, min_sqnr_db, metric_output))
    if res.winner is None:
        raise GateFailedError(f"no candidate met --max-accuracy-drop {max_accuracy_drop}",
                              "relax the bound or give better calibration data",
                              details={"result": res.model_dump(mode="json")})

    def human(c):
        c.print("waterfall (the path's steps; pruned/recovered and every INT8 mode x backend and native float "
                "precision tried shown even when not kept, with why; final medians, each candidate in its own "
                "blocks of calls, measured here):", markup=False)
        c.print(waterfall_text(res.waterfall), markup=False)
        c.print("\nPareto front (latency vs accuracy; * = winner):", markup=False)
        c.print(pareto_text(res.pareto, res.winner.label), markup=False)
        for sk in res.skipped:
            c.print(f"skipped: {sk}", markup=False)
        c.print(f"\nwinner: {res.winner.label}: p50 {res.winner.p50_ms:.4f} ms, accuracy drop "
                f"{res.winner.accuracy_drop} pts ({res.winner.accuracy_basis})", markup=False)
        for what, where in (("artifact", res.output), ("recipe", res.recipe)):
            if where:
                c.print(f"wrote {what} {where}", markup=False)
        c.print(f"searched in {res.seconds:.0f} s", markup=False)

    emit(json_out, res.model_dump(mode="json"), human)
