"""``edgeopt pipeline init MODEL`` and ``edgeopt pipeline run edgeopt.yaml``: firmware builds."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit, stderr

pipeline_app = typer.Typer(help="Firmware builds from an edgeopt.yaml: targets, gates, dist/, cache.",
                           no_args_is_help=True)
app.add_typer(pipeline_app, name="pipeline")


@pipeline_app.command("init")
def init_cmd(
    model: Path = typer.Argument(..., help="The ONNX model the recipe builds."),
    output: Path = typer.Option(Path("edgeopt.yaml"), "--output", "-o", help="Recipe file to write."),
    profile: str = typer.Option("host", "--profile", "-p", help="Device profile of the first target."),
    calib: Path = typer.Option(None, "--calib", help="Calibration data to name in the recipe."),
    eval_: Path = typer.Option(None, "--eval", help="Evaluation data (with labels) to name in the recipe."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file."),
    json_out: bool = JsonOption,
) -> None:
    """Write a commented starter edgeopt.yaml for MODEL (inputs read from the model)."""
    from edgeopt.pipeline.init import init_recipe

    res = init_recipe(model, output, profile=profile, calib=calib, eval=eval_, force=force)

    def human(c):
        c.print(f"wrote {res['recipe']} (inputs: {res['inputs']}); build it with: edgeopt pipeline run {res['recipe']}",
                markup=False)

    emit(json_out, res, human)


def _table(result) -> str:
    lines = [f"{'target':24} {'status':12} {'backend':11} {'prec':5} {'cached':6} {'acc drop':>8} {'p99 ms':>9} {'KiB':>9}"]
    from edgeopt.validation_model import counted_drop

    for t in result.targets:
        drop, _ = counted_drop(t.validation)  # the drop the gate counts (labels, else vs FP32)
        p99 = (t.bench or {}).get("p99_ms")
        kib = t.artifact_bytes
        lines.append(f"{t.name[:24]:24} {t.status:12} {str(t.backend or '-'):11} "
                     f"{str(t.precision or '-'):5} {'-' if t.cached is None else str(t.cached):6} "
                     f"{'-' if drop is None else f'{drop:.2f}':>8} {'-' if p99 is None else f'{p99:.4f}':>9} "
                     f"{'-' if kib is None else f'{kib / 1024:.1f}':>9}")
    return "\n".join(lines)


@pipeline_app.command("run")
def run_cmd(
    recipe: Path = typer.Argument(Path("edgeopt.yaml"), help="The recipe file."),
    bench: str = typer.Option("local", "--bench", help="local: benchmark every target here; none: skip."),
    output: Path = typer.Option(None, "--output", "-o", help="dist/ directory (default: the recipe's 'output')."),
    json_out: bool = JsonOption,
) -> None:
    """Build every target, validate, benchmark, check the gates and write dist/ (exit 5 on a missed gate)."""
    from edgeopt.pipeline.run import raise_for_failures, run_pipeline

    def event(message: str) -> None:
        stderr.print(message, markup=False, highlight=False)

    result = run_pipeline(recipe, bench=bench, output=output, on_event=event)
    if result.ok:
        def human(c):
            c.print(_table(result), markup=False)
            for n in result.notes:
                c.print(f"note: {n}", markup=False)
            c.print(f"wrote {result.output} in {result.seconds:.1f} s", markup=False)

        emit(json_out, result.model_dump(mode="json"), human)
        return
    if not json_out:
        typer.echo(_table(result), err=True)
    raise_for_failures(result)
