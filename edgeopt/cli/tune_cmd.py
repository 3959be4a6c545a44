"""``edgeopt tune MODEL --profile P --trials N | --time-budget MIN``: MetaSchedule tuning for the TVM backend."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.chain_flags import chain_flags
from edgeopt.cli.options import (
    CalibOption,
    DryRunOption,
    EvalOption,
    InputShapeOption,
    PreprocessOption,
    ProfileDirOption,
    ProfileOption,
    RecipeOption,
)
from edgeopt.cli.output import JsonOption, emit, progress_factory, warn


@app.command("tune")
@chain_flags(exclude=("backend", "export_c", "c_name", "memory_budget"))  # TVM's plan: no other backend, no C array
def tune_cmd(
    model: Path = typer.Argument(..., help="The ONNX model."),
    profile: str = ProfileOption,
    trials: int = typer.Option(None, "--trials", help="Measurement trials in all (~10 s each on 2 cores)."),
    time_budget: float = typer.Option(None, "--time-budget", help="Stop after this many minutes."),
    tuning_db: Path = typer.Option(None, "--tuning-db", help="Database directory (default: the recipe's "
                                   "stages.tvm.tuning_db, else $EDGEOPT_CACHE_DIR/tvm-tuning/<key>)."),
    rpc_tracker: str = typer.Option(None, "--rpc-tracker", help="HOST:PORT of a TVM RPC tracker (measure on the board)."),
    rpc_key: str = typer.Option(None, "--rpc-key", help="The board's key at the tracker."),
    calib: Path = CalibOption,
    eval_: Path = EvalOption,
    preprocess: str = PreprocessOption,
    input_shape: list[str] = InputShapeOption,
    recipe: Path = RecipeOption,
    dry_run: bool = DryRunOption,
    profile_dir: list[Path] = ProfileDirOption,
    json_out: bool = JsonOption,
    chain: dict | None = None,
) -> None:
    """Tune a model's TVM kernels for a profile; later 'convert --backend tvm' runs with the same flags use the database."""
    from edgeopt.options import ConvertOptions, from_keywords
    from edgeopt.tune import tune, tune_plan

    options = from_keywords(ConvertOptions, dict(  # the flags convert takes: tune plans what convert would
        **(chain or {}), recipe=recipe, calib=calib, eval=eval_, input_shapes=input_shape, preprocess=preprocess,
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
