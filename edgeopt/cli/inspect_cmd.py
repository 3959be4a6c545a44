"""``edgeopt inspect OUT/``: print an artifact's manifest (after checking its files' sha256)."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit


@app.command("inspect")
def inspect_cmd(
    artifact: Path = typer.Argument(..., help="An artifact directory written by 'edgeopt convert'."),
    as_loaded: bool = typer.Option(False, "--as-loaded", help="Also write the graph after the runtime's own "
                                   "optimizations (ONNX Runtime's optimized model at the runner's level, OpenVINO's "
                                   "compiled runtime model) and summarise it: op types, Q/DQ by dtype, int32 DQs, "
                                   "precisions, nodes per provider."),
    loaded_out: Path | None = typer.Option(None, "--as-loaded-out", help="Where --as-loaded writes the graph "
                                           "(default: beside the artifact, ART.as-loaded.onnx or .xml)."),
    json_out: bool = JsonOption,
) -> None:
    """Show an artifact's manifest: backend, precision, io, stages, validation, files."""
    from edgeopt.artifact import load_artifact, read_build_facts
    from edgeopt.cli.artifact_text import checked_on_text

    manifest = load_artifact(artifact)  # with build.json's timings merged in
    m, v = manifest.model_dump(mode="json"), manifest.validation
    build = read_build_facts(artifact) if m.get("build_facts") else None
    loaded = None
    if as_loaded:
        from edgeopt.as_loaded import as_loaded as graph_as_loaded

        loaded = graph_as_loaded(artifact, m, loaded_out)

    def human(c):
        c.print(f"{artifact}: {m['backend']} {m['precision']} for profile {m['profile']} (edgeopt {m['edgeopt_version']}, {m['created']})", markup=False)
        c.print(f"source: {m['source_model']['path']} sha256 {m['source_model']['sha256'][:16]}…", markup=False)
        for kind in ("inputs", "outputs"):
            for t in m[kind]:
                c.print(f"  {kind[:-1]} {t['name']}: {t['shape']} {t['dtype']} {t.get('layout') or ''}", markup=False)
        for s in manifest.stages:
            cos = s.checks.get("cosine_min")
            took = f"{s.seconds} s" if s.seconds is not None else "duration not recorded"
            c.print(f"  stage {s.name}: {took}" + (f", cosine_min {cos:.6f}" if cos is not None else ""), markup=False)
        if build:
            c.print(f"built {build.get('built_at')} on {build.get('host')} (load {build.get('load_avg')})", markup=False)
        det = manifest.determinism
        if det:
            c.print(f"deterministic: {det.deterministic} ({det.why})", markup=False)
        cal = m["calibration"]
        if cal["samples"]:
            c.print(f"calibration: {cal['samples']} samples from {cal['source']}" + (" (SYNTHETIC)" if cal["synthetic"] else ""), markup=False)
        if v is not None:
            figures = ", ".join(f"{k}={getattr(v, k):.6g}" for k in ("cosine_min", "max_abs_err", "top1_agreement",
                                                                    "accuracy", "accuracy_drop") if getattr(v, k) is not None)
            c.print(f"validation ({v.samples} {v.data_source} samples): {figures}", markup=False)
            if v.checked_on:
                c.print(checked_on_text(v.checked_on), markup=False)
            if v.metric:
                unit = v.metric_unit or ""
                c.print(f"metric {v.metric} (vs {v.metric_basis}): FP32 {v.metric_reference:.4g}{unit} -> "
                        f"{v.metric_value:.4g}{unit}, drop {v.metric_drop:.4g}", markup=False)
        for line in _findings(manifest, m):
            c.print(line, markup=False)
        for name, digest in m["files"].items():
            c.print(f"  file {name} sha256 {digest[:16]}…", markup=False)
        for w in m["warnings"]:
            c.print(f"warning: {w}", markup=False)
        if loaded:
            from edgeopt.as_loaded import as_loaded_text

            for line in as_loaded_text(loaded):
                c.print(line, markup=False)

    data = {"artifact": str(artifact), "manifest": m, "build": build}
    if loaded:
        data["as_loaded"] = loaded
    emit(json_out, data, human)


def _findings(manifest, m: dict) -> list[str]:
    """What the checks after the build found: the plain-API load, memory, the backends left and searched, the
    precision fallback."""
    from edgeopt.cli.artifact_text import (
        backend_search_text,
        consumer_check_text,
        precision_fallback_text,
        speed_claim_text,
    )
    from edgeopt.memory.report import memory_lines

    lines = consumer_check_text(m["consumer_check"]) if m.get("consumer_check") else []
    lines += memory_lines(manifest.memory) if manifest.memory else []
    lines += [f"backend {left.backend} left (exit {left.exit_code}): {left.reason}" for left in manifest.backend_fallback]
    claim = m.get("speed_claim")
    lines += [backend_search_text(r.model_dump(mode="json"), claim) for r in manifest.backend_search]
    lines += [speed_claim_text(claim)] if claim else []
    if manifest.precision_fallback:
        lines.append(precision_fallback_text(manifest.precision, manifest.precision_fallback))
    return lines
