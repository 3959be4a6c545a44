"""``edgeopt convert MODEL --profile P -o OUT``: the converter chain, validated, into an artifact."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from edgeopt.validation_model import Validation


@app.command("convert")
@chain_flags()
def convert_cmd(
    model: Path = typer.Argument(None, help="The ONNX model (omit with --from-torch)."),
    profile: str = ProfileOption,
    output: Path = typer.Option(None, "--output", "-o",
                                help="Artifact directory to write (default: MODEL-PROFILE in the current directory)."),
    calib: Path = CalibOption,
    eval_: Path = EvalOption,
    preprocess: str = PreprocessOption,
    input_shape: list[str] = InputShapeOption,
    recipe: Path = RecipeOption,
    force: bool = typer.Option(False, "--force", help="Replace an existing output."),
    dry_run: bool = DryRunOption,
    from_torch: str = typer.Option(None, "--from-torch", help="package.module:factory building a torch.nn.Module."),
    weights: Path = typer.Option(None, "--weights", help="State dict for --from-torch."),
    profile_dir: list[Path] = ProfileDirOption,
    verify_on: str = typer.Option(None, "--verify-on", help="A device (inventory name, e.g. pi5-emu): run the "
                                  "artifact there on the check samples and compare with this host's run; a "
                                  "difference beyond the tolerance is exit 5 and nothing is written."),
    fallback: bool = typer.Option(True, "--fallback/--no-fallback",
                                  help="ARM profiles: when the profile's first backend misses the bound, try its next "
                                  "one, and when no INT8 holds, write the best float precision that holds (labelled). "
                                  "--no-fallback: exit 5 instead."),
    json_out: bool = JsonOption,
    chain: dict | None = None,
) -> None:
    """Convert a model for a device profile into a validated artifact directory."""
    from edgeopt.convert_on_device import convert
    from edgeopt.errors import UsageError
    from edgeopt.options import ConvertOptions, from_keywords

    if model is None and from_torch is None:
        raise UsageError("no model given", "pass an ONNX file, or --from-torch package.module:factory --weights FILE")
    if output is None and not dry_run:  # `convert model.onnx --profile jetson-orin` writes model-jetson-orin/
        output = Path(f"{Path(model or from_torch.split(':')[0]).stem}-{Path(profile).stem}")
    chain = dict(chain or {})
    if chain.get("export_c") and not chain.get("c_name") and model:  # the C symbols: the model file's name
        chain["c_name"] = Path(model).stem
    options = from_keywords(ConvertOptions, dict(
        **chain, recipe=recipe, calib=calib, eval=eval_, input_shapes=input_shape, preprocess=preprocess,
        from_torch=from_torch, weights=weights, profile_dirs=profile_dir, force=force, dry_run=dry_run,
        verify_on=verify_on, fallback=fallback,
    ), where="convert")
    from edgeopt.metrics.custom import mark, spent_since

    metric_mark = mark()
    result = convert(model, profile, output, options, progress=progress_factory(json_out), on_warning=warn)
    if dry_run:
        from edgeopt.metric_choice import describe

        emit(json_out, {"dry_run": True, "plan": result.plan.to_json(), "warnings": result.warnings,
                        "metric": result.metric},
             lambda c: c.print("\n".join(filter(None, [str(result.plan), describe(result.metric)])), markup=False))
    else:
        _report(result, json_out, spent_since(metric_mark))


def _report(result, json_out: bool, metric_time: dict | None = None) -> None:
    """The written artifact: its plan, validation and (``--verify-on``) the device's check; ``metric_time``: a
    user metric's calls and seconds over the whole run (None: none was called)."""
    from edgeopt.int8_verdict import int8_verdict

    v = result.validation
    m = result.manifest
    if metric_time is not None and v is not None and v.metric_time:
        metric_time = {**metric_time, "validation": v.metric_time}
    claim = m.speed_claim.model_dump(mode="json") if m.speed_claim else None
    verdict = int8_verdict(m.precision, v.units if v else None, m.stages, measured=claim and claim["measured"])
    payload = {"artifact": result.artifact_dir, "backend": m.backend, "precision": m.precision, "verdict": verdict,
               "plan_hash": result.plan.hash, "validation": v.model_dump(mode="json") if v else {},
               "calibration": m.calibration.model_dump(mode="json"),
               "warnings": result.warnings, "stages": [{"name": s.name, "seconds": s.seconds} for s in m.stages],
               "verified_on": m.verified_on.model_dump(mode="json") if m.verified_on else None, "precision_fallback": m.precision_fallback.model_dump(mode="json") if m.precision_fallback else None,
               "backend_search": [r.model_dump(mode="json") for r in m.backend_search], "speed_claim": claim,
               "memory": m.memory.model_dump(mode="json") if m.memory else None,
               "consumer_check": m.consumer_check.model_dump(mode="json") if m.consumer_check else None,
               "metric_time": metric_time}

    from edgeopt.cli.artifact_text import (
        backend_search_text,
        checked_on_text,
        consumer_check_text,
        mode_search_text,
        precision_fallback_text,
        speed_claim_text,
    )

    def human(c):
        c.print(str(result.plan), markup=False)
        c.print(f"wrote {result.artifact_dir}", markup=False)
        if verdict:
            c.print(f"result: {verdict}", markup=False)
        c.print(_validation_text(v), markup=False)
        if metric_time:
            val = metric_time.get("validation")
            here = f", {val['seconds']:.3g} s of them in the validation" if val else ""
            c.print(f"your metric: {metric_time['calls']} calls, {metric_time['seconds']:.3g} s{here}", markup=False)
        if v is not None and v.checked_on:
            c.print(checked_on_text(v.checked_on), markup=False)
        if m.precision_fallback:
            c.print(precision_fallback_text(m.precision, m.precision_fallback), markup=False)
        for row in m.backend_search:
            c.print(backend_search_text(row.model_dump(mode="json"), claim), markup=False)
        if claim:
            c.print(speed_claim_text(claim), markup=False)
        for st in m.stages:
            if st.report.get("mode_search"):
                c.print(mode_search_text(st.name, st.report["mode_search"]), markup=False)
        if m.verified_on:
            c.print(_verified_text(m.verified_on.model_dump(mode="json")), markup=False)
        _memory_text(c, m)
        for line in consumer_check_text(m.consumer_check.model_dump(mode="json")) if m.consumer_check else []:
            c.print(line, markup=False)

    emit(json_out, payload, human)


def _memory_text(c, m) -> None:
    """The memory record and a microcontroller build's TFLite Micro report (edgeopt/memory/report.py)."""
    from edgeopt.memory.report import memory_line, micro_lines

    if m.memory is not None:
        c.print(memory_line(m.memory), markup=False)
    for st in m.stages:
        for line in micro_lines(st.report["micro"]) if st.report.get("micro") else []:
            c.print(line, markup=False)


def _validation_text(v: Validation | None) -> str:
    if v is None:
        return "not validated"
    parts = [f"validation on {v.samples} {v.data_source} samples" + (" (SYNTHETIC)" if v.synthetic else "") + ":"]
    for key in ("cosine_min", "cosine_mean", "max_abs_err", "top1_agreement", "accuracy_reference", "accuracy", "accuracy_drop"):
        if getattr(v, key) is not None:
            parts.append(f"{key}={getattr(v, key):.6g}")
    if v.units:
        u = v.units
        parts.append(f"\nunits in {u['file']}: {u['quantized']} quantized, {u['float']} float")
    if v.metric:
        unit = v.metric_unit or ""
        parts.append(f"\nmetric {v.metric} ({v.metric_basis}): FP32 {v.metric_reference:.4g}{unit} -> "
                     f"{v.metric_value:.4g}{unit} (drop {v.metric_drop:.4g})")
    return " ".join(parts)


def _verified_text(vo: dict) -> str:
    where = "emulated " if vo.get("emulated") else ""
    return (f"verified on {where}device {vo['device']} ({vo.get('device_arch') or '?'}, {vo['samples']} samples): "
            + _verified_rule(vo))


def _verified_rule(vo: dict) -> str:
    """Which rule passed: within the rounding tolerance, or beyond it and as accurate vs FP32 there as here."""
    err = vo.get("error_vs_fp32")
    if not err:
        return f"max |diff| {vo['max_abs_diff']:.3g} <= tolerance {vo['tolerance']:.3g}"
    return (f"max |diff| {vo['max_abs_diff']:.3g} is beyond the tolerance {vo['tolerance']:.3g}, but the board is as "
            f"accurate vs FP32 as this host ({err['measure']}: {err['board']:.3g} there, {err['here']:.3g} here, at most "
            f"{err['allowed']:.3g})")
