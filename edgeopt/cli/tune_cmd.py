"""``edgeopt tune MODEL --profile P --trials N | --time-budget MIN``: MetaSchedule tuning for the TVM backend."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.options import InputShapeOption, ProfileDirOption, ProfileOption
from edgeopt.cli.output import JsonOption, emit, progress_factory, warn


@app.command("tune")
def tune_cmd(
    model: Path = typer.Argument(..., help="The ONNX model."),
    profile: str = ProfileOption,
    trials: int = typer.Option(None, "--trials", help="Measurement trials in all (~10 s each on 2 cores)."),
    time_budget: float = typer.Option(None, "--time-budget", help="Stop after this many minutes."),
    tuning_db: Path = typer.Option(None, "--tuning-db", help="Database directory (default: $EDGEOPT_CACHE_DIR/tvm-tuning/<key>)."),
    rpc_tracker: str = typer.Option(None, "--rpc-tracker", help="HOST:PORT of a TVM RPC tracker (measure on the board)."),
    rpc_key: str = typer.Option(None, "--rpc-key", help="The board's key at the tracker."),
    precision: str = typer.Option(None, "--precision", help="fp32 | int8 (default: the profile's; must match convert's)."),
    calib: Path = typer.Option(None, "--calib", help="Calibration data (INT8), as given to convert."),
    input_shape: list[str] = InputShapeOption,
    profile_dir: list[Path] = ProfileDirOption,
    json_out: bool = JsonOption,
) -> None:
    """Tune a model's TVM kernels for a profile; later 'convert --backend tvm' runs use the database."""
    from edgeopt.converters.tvm_tune import tune

    result = tune(model, profile, trials=trials, time_budget_min=time_budget, tuning_db=tuning_db,
                  rpc_tracker=rpc_tracker, rpc_key=rpc_key, precision=precision, calib=calib,
                  input_shapes=input_shape, profile_dirs=profile_dir, progress=progress_factory(json_out),
                  on_warning=warn)
    payload = result.model_dump(mode="json")

    def human(c):
        c.print(f"tuned {len(result.tasks)} tasks for {result.profile} ({result.runner}): {result.trials_measured} trials "
                f"measured ({result.trials_failed} failed) in {result.seconds:.0f} s, stopped by {result.stopped_by}",
                markup=False)
        c.print(f"database {result.database} ({result.records} records, key {result.key})", markup=False)
        for name, ms in sorted(result.best_ms.items(), key=lambda kv: -kv[1]):
            c.print(f"  {name}: best {ms:.4f} ms", markup=False)

    emit(json_out, payload, human)
    if result.stopped_by == "interrupted":
        raise typer.Exit(130)
