"""``edgeopt convert MODEL --profile P -o OUT``: the converter chain, validated, into an artifact."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.options import (
    CtcBlankOption,
    InputShapeOption,
    MetricAxisOption,
    MetricOption,
    MetricThresholdOption,
    MinSpeedupOption,
    MinSqnrOption,
    ProfileDirOption,
    ProfileOption,
    SearchBudgetOption,
)
from edgeopt.cli.output import JsonOption, emit, progress_factory, warn


@app.command("convert")
def convert_cmd(
    model: Path = typer.Argument(None, help="The ONNX model (omit with --from-torch)."),
    profile: str = ProfileOption,
    output: Path = typer.Option(None, "--output", "-o",
                                help="Artifact directory to write (default: MODEL-PROFILE in the current directory)."),
    backend: str = typer.Option(None, "--backend", help="onnxruntime | openvino | tflite | tvm (default: the profile's)."),
    precision: str = typer.Option(None, "--precision", help="int8 | fp16 | fp32 (default: the profile's)."),
    quant_mode: str = typer.Option(None, "--quant-mode",
                                   help="static | dynamic | weights | auto: the kind of INT8 (auto, the default: with "
                                   "--max-accuracy-drop the fastest that fits the graph and holds the bound)."),
    prune: str = typer.Option(None, "--prune", help="Fraction of channels to remove (0-1), or 'auto': the largest "
                              "ratio whose recovered model stays within --max-accuracy-drop (needs it and --calib)."),
    prune_mode: str = typer.Option(None, "--prune-mode", help="channels | 2:4"),
    recover: bool = typer.Option(None, "--recover/--no-recover",
                                 help="Distil the pruned model from FP32 on --calib (default: when the train extra is installed)."),
    recover_budget: float = typer.Option(None, "--recover-budget", min=0.001, help="Seconds for recovery (default 120)."),
    calib: Path = typer.Option(None, "--calib", help="Calibration data: .npz named after the inputs, or an image folder."),
    eval_: Path = typer.Option(None, "--eval", help="Evaluation data (.npz with 'labels', or class sub-folders)."),
    preprocess: str = typer.Option(None, "--preprocess", help="Image preprocessing: resize=224x224,mean=...,std=...,layout=NCHW,channels=RGB,scale=255 or a YAML file."),
    calib_method: str = typer.Option(None, "--calib-method", help="minmax | percentile"),
    input_shape: list[str] = InputShapeOption,
    max_accuracy_drop: float = typer.Option(None, "--max-accuracy-drop",
                                            help="Gate: most points of the task metric lost (dB below --min-sqnr-db for sqnr)."),
    min_cosine: float = typer.Option(None, "--min-cosine", help="Gate: least cosine similarity to FP32."),
    search_budget: float = SearchBudgetOption,
    min_speedup: float = MinSpeedupOption,
    metric: str = MetricOption,
    metric_axis: int = MetricAxisOption,
    ctc_blank: int = CtcBlankOption,
    metric_threshold: float = MetricThresholdOption,
    min_sqnr_db: float = MinSqnrOption,
    recipe: Path = typer.Option(None, "--recipe", help="Recipe YAML (backend, precision, prune, stages: {...})."),
    threads: int = typer.Option(None, "--threads", help="Runtime threads."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and stop."),
    from_torch: str = typer.Option(None, "--from-torch", help="package.module:factory building a torch.nn.Module."),
    weights: Path = typer.Option(None, "--weights", help="State dict for --from-torch."),
    profile_dir: list[Path] = ProfileDirOption,
    export_c: bool = typer.Option(False, "--export-c", help="tflite: also write model_data.h/.c (C array for firmware)."),
    json_out: bool = JsonOption,
) -> None:
    """Convert a model for a device profile into a validated artifact directory."""
    from edgeopt.cli.options import metric_spec
    from edgeopt.convert import convert
    from edgeopt.errors import UsageError
    from edgeopt.options import ConvertOptions, from_keywords

    if model is None and from_torch is None:
        raise UsageError("no model given", "pass an ONNX file, or --from-torch package.module:factory --weights FILE")
    if output is None and not dry_run:  # `convert model.onnx --profile jetson-orin` writes model-jetson-orin/
        output = Path(f"{Path(model or from_torch.split(':')[0]).stem}-{Path(profile).stem}")
    if export_c:  # the tflite backend's export_c, passed as a recipe override
        from edgeopt.converters.c_export import recipe_with_export_c

        recipe = recipe_with_export_c(recipe, Path(model).stem if model else None)
    options = from_keywords(ConvertOptions, dict(
        backend=backend, precision=precision, quant_mode=quant_mode, prune=prune, prune_mode=prune_mode, recover=recover,
        recover_budget=recover_budget, calib_method=calib_method, max_accuracy_drop=max_accuracy_drop,
        min_cosine=min_cosine, search_budget=search_budget, min_speedup=min_speedup, threads=threads,
        metric=metric_spec(metric, metric_axis, ctc_blank, metric_threshold, min_sqnr_db),
        recipe=recipe, calib=calib, eval=eval_, input_shapes=input_shape, preprocess=preprocess,
        from_torch=from_torch, weights=weights, profile_dirs=profile_dir, force=force, dry_run=dry_run,
    ), where="convert")
    result = convert(model, profile, output, options, progress=progress_factory(json_out), on_warning=warn)
    plan_json = result.plan.to_json()
    if dry_run:
        def human_plan(c):
            c.print(str(result.plan), markup=False)

        emit(json_out, {"dry_run": True, "plan": plan_json, "warnings": result.warnings}, human_plan)
        return
    v = result.validation or {}
    m = result.manifest
    payload = {"artifact": result.artifact_dir, "backend": m.backend, "precision": m.precision,
               "plan_hash": result.plan.hash, "validation": v, "calibration": m.calibration.model_dump(mode="json"),
               "warnings": result.warnings, "stages": [{k: s[k] for k in ("name", "seconds")} for s in m.stages]}

    def human(c):
        c.print(str(result.plan), markup=False)
        c.print(f"wrote {result.artifact_dir}", markup=False)
        c.print(_validation_text(v), markup=False)

    emit(json_out, payload, human)


def _validation_text(v: dict) -> str:
    if not v:
        return "not validated"
    parts = [f"validation on {v['samples']} {v['data_source']} samples" + (" (SYNTHETIC)" if v.get("synthetic") else "") + ":"]
    for key in ("cosine_min", "cosine_mean", "max_abs_err", "top1_agreement", "accuracy_reference", "accuracy", "accuracy_drop"):
        if v.get(key) is not None:
            parts.append(f"{key}={v[key]:.6g}")
    if v.get("metric"):
        unit = v.get("metric_unit") or ""
        parts.append(f"\nmetric {v['metric']} ({v.get('metric_basis')}): FP32 {v['metric_reference']:.4g}{unit} -> "
                     f"{v['metric_value']:.4g}{unit} (drop {v['metric_drop']:.4g})")
    return " ".join(parts)
