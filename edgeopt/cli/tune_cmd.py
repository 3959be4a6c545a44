"""``edgeopt tune MODEL --profile P --trials N | --time-budget MIN``: MetaSchedule tuning for the TVM backend."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.options import (
    CalibMethodOption,
    CalibOption,
    CtcBlankOption,
    DryRunOption,
    EvalOption,
    InputShapeOption,
    MaxAccuracyDropOption,
    MetricAxisOption,
    MetricOption,
    MetricThresholdOption,
    MinCosineOption,
    MinSpeedupOption,
    MinSqnrOption,
    PrecisionOption,
    PreprocessOption,
    ProfileDirOption,
    ProfileOption,
    PruneModeOption,
    PruneOption,
    RecipeOption,
    RecoverBudgetOption,
    RecoverOption,
    SearchBudgetOption,
    ThreadsOption,
)
from edgeopt.cli.output import JsonOption, emit, progress_factory, warn


@app.command("tune")
def tune_cmd(
    model: Path = typer.Argument(..., help="The ONNX model."),
    profile: str = ProfileOption,
    trials: int = typer.Option(None, "--trials", help="Measurement trials in all (~10 s each on 2 cores)."),
    time_budget: float = typer.Option(None, "--time-budget", help="Stop after this many minutes."),
    tuning_db: Path = typer.Option(None, "--tuning-db", help="Database directory (default: the recipe's "
                                   "stages.tvm.tuning_db, else $EDGEOPT_CACHE_DIR/tvm-tuning/<key>)."),
    rpc_tracker: str = typer.Option(None, "--rpc-tracker", help="HOST:PORT of a TVM RPC tracker (measure on the board)."),
    rpc_key: str = typer.Option(None, "--rpc-key", help="The board's key at the tracker."),
    precision: str = PrecisionOption,
    prune: str = PruneOption,
    prune_mode: str = PruneModeOption,
    recover: bool = RecoverOption,
    recover_budget: float = RecoverBudgetOption,
    calib: Path = CalibOption,
    eval_: Path = EvalOption,
    preprocess: str = PreprocessOption,
    calib_method: str = CalibMethodOption,
    input_shape: list[str] = InputShapeOption,
    max_accuracy_drop: float = MaxAccuracyDropOption,
    min_cosine: float = MinCosineOption,
    search_budget: float = SearchBudgetOption,
    min_speedup: float = MinSpeedupOption,
    metric: str = MetricOption,
    metric_axis: int = MetricAxisOption,
    ctc_blank: int = CtcBlankOption,
    metric_threshold: float = MetricThresholdOption,
    min_sqnr_db: float = MinSqnrOption,
    recipe: Path = RecipeOption,
    threads: int = ThreadsOption,
    dry_run: bool = DryRunOption,
    profile_dir: list[Path] = ProfileDirOption,
    json_out: bool = JsonOption,
) -> None:
    """Tune a model's TVM kernels for a profile; later 'convert --backend tvm' runs with the same flags use the database."""
    from edgeopt.cli.options import metric_spec
    from edgeopt.options import ConvertOptions, from_keywords
    from edgeopt.tune import tune, tune_plan

    options = from_keywords(ConvertOptions, dict(  # the flags convert takes: tune plans what convert would
        precision=precision, prune=prune, prune_mode=prune_mode, recover=recover, recover_budget=recover_budget,
        calib_method=calib_method, max_accuracy_drop=max_accuracy_drop, min_cosine=min_cosine,
        search_budget=search_budget, min_speedup=min_speedup, threads=threads,
        metric=metric_spec(metric, metric_axis, ctc_blank, metric_threshold, min_sqnr_db),
        recipe=recipe, calib=calib, eval=eval_, input_shapes=input_shape, preprocess=preprocess,
        profile_dirs=profile_dir,
    ), where="tune")
    if dry_run:
        plan = tune_plan(profile, options)
        emit(json_out, {"dry_run": True, "plan": plan.to_json(), "warnings": list(plan.warnings)},
             lambda c: c.print(str(plan), markup=False))
        return
    result = tune(model, profile, options, trials=trials, time_budget_min=time_budget, tuning_db=tuning_db,
                  rpc_tracker=rpc_tracker, rpc_key=rpc_key, progress=progress_factory(json_out), on_warning=warn)
    payload = result.model_dump(mode="json")

    def human(c):
        c.print(f"tuned {len(result.tasks)} tasks for {result.profile} ({result.runner}): {result.trials_measured} trials "
                f"measured ({result.trials_failed} failed) in {result.seconds:.0f} s, stopped by {result.stopped_by}",
                markup=False)
        c.print(f"database {result.database} ({result.records} records, key {result.key}; plan "
                f"{result.plan_hash[:12]})", markup=False)
        for name, ms in sorted(result.best_ms.items(), key=lambda kv: -kv[1]):
            c.print(f"  {name}: best {ms:.4f} ms", markup=False)

    emit(json_out, payload, human)
    if result.stopped_by == "interrupted":
        raise typer.Exit(130)
