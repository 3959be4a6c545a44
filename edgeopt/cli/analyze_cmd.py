"""``edgeopt analyze MODEL --profile P``: why a model will be slow on a device (roofline estimate)."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.options import InputShapeOption, ProfileDirOption, ProfileOption
from edgeopt.cli.output import JsonOption, emit, stderr

MemoryBudgetOption = typer.Option(
    None, "--memory-budget", help="Memory the model may take on the device, e.g. 300MB or 512KB (default: the "
    "profile's budget_mb, else its RAM): the memory prediction is judged against it, as convert's gate does.")


@app.command()
def analyze(
    model: Path = typer.Argument(..., help="The ONNX model.", show_default=False),
    profile: str = ProfileOption,
    input_shape: list[str] = InputShapeOption,
    profile_dir: list[Path] = ProfileDirOption,
    plot: Path = typer.Option(None, "--plot", help="Write the roofline chart to FILE.png or FILE.svg."),
    top: int = typer.Option(10, "--top", min=0, help="How many of the heaviest ops to list."),
    efficiency: float = typer.Option(
        1.0, "--efficiency", min=0.001, max=1.0,
        help="Share of peak compute/bandwidth reached (1 = pure roofline); divides the roofline into estimate_ms.",
    ),
    overhead_us: float = typer.Option(
        None, "--overhead-us", min=0.0, help="Runtime dispatch overhead per executed op, in us (default 1)."
    ),
    no_preflight: bool = typer.Option(False, "--no-preflight", help="Skip asking the backends what they support."),
    memory_budget: str = MemoryBudgetOption,
    json_out: bool = JsonOption,
) -> None:
    """Predict latency with a roofline on the profile's units, list the heaviest ops, pre-flight the
    backends and recommend what to change. Every latency is an estimate. Given an early-exit artifact (a folder
    with cascade.json): the mean and worst case predicted from the exit shares measured at convert time."""
    from edgeopt import api
    from edgeopt.analyze import analyze_model
    from edgeopt.analyze import early_exit as ee
    from edgeopt.model import parse_input_shapes

    cascade = None
    if ee.is_cascade(model):  # the source model's analysis (where it is at hand) and the cascade's prediction
        cascade, model = ee.cascade_prediction(model), ee.source_model(model)
        if model is None:
            return ee.emit_alone(cascade, json_out)

    shapes = parse_input_shapes(input_shape)
    budget = _budget(memory_budget)
    if plot is not None:
        from edgeopt.analyze.plot import check_plot_path

        check_plot_path(plot)  # before the analysis, not after it
    prof = api.load_profile(profile, profile_dir)
    result = analyze_model(
        model, prof, input_shapes=shapes, top=top, efficiency=efficiency,
        overhead_us_per_op=overhead_us, preflight=not no_preflight,
    )
    from edgeopt.memory.report import analyze_memory, memory_line
    from edgeopt.placement.plans import model_placement

    placement = model_placement(model, prof)  # op → unit on the profile's first backend (asked, else predicted)
    fit, memory_pred = analyze_memory(model, prof, shapes, budget)
    plot_path = memory_plot = None
    if plot is not None:
        from edgeopt.analyze.plot import plot_roofline
        from edgeopt.memory.report import plot_memory

        plot_path = str(plot_roofline(result, plot))
        memory_plot = str(plot_memory(memory_pred, fit.budget_bytes, plot.with_name(f"{plot.stem}-memory{plot.suffix}")))

    def human(console):
        from edgeopt.analyze.report import render

        render(result, console, top=top)
        if placement:
            from edgeopt.placement import placement_line

            console.print(placement_line(placement), markup=False)
        console.print(memory_line(fit), markup=False)
        if cascade is not None:
            console.print("\n".join(ee.lines(cascade)), markup=False)
        if plot_path:
            console.print(f"roofline chart (estimate): {plot_path}; memory chart (estimate): {memory_plot}")

    payload = {"analysis": result.model_dump(mode="json"), "placement": placement,
               "memory": fit.model_dump(mode="json")}
    if cascade is not None:
        payload["early_exit"] = ee.with_profile(cascade, result)
    if plot_path:
        payload["plot"] = plot_path
        payload["memory_plot"] = memory_plot
    if json_out and plot_path:
        stderr.print(f"roofline chart written to {plot_path}")
    emit(json_out, payload, human)


def _budget(text: str | None):
    """``--memory-budget`` as the options the memory report reads (None: the profile's budget)."""
    if text is None:
        return None
    from types import SimpleNamespace

    from edgeopt.errors import UsageError
    from edgeopt.options import parse_bytes

    try:
        return SimpleNamespace(memory_budget=parse_bytes(text))
    except ValueError as err:
        raise UsageError(f"--memory-budget {text!r}: {err}", "give a size such as 300MB, 512KB or 1.5GB") from None
