"""``edgeopt bench ARTIFACT...`` or ``edgeopt bench MODEL.onnx --profile P --backends all``."""

from __future__ import annotations

import json as _json
import sys
from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.chain_flags import chain_option
from edgeopt.cli.options import (
    BatchOption,
    CalibOption,
    CtcBlankOption,
    MetricAxisOption,
    MetricOption,
    MetricThresholdOption,
    StreamsOption,
    metric_spec,
)
from edgeopt.cli.output import JsonOption, emit
from edgeopt.errors import UsageError


def _labels(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            key, value = "label", item
        if not key or not value:
            raise UsageError(f"--label '{item}' is not KEY=VALUE", "e.g. --label stage=int8 or --label nightly")
        out[key.strip()] = value.strip()
    return out


@app.command()
def bench(
    targets: list[Path] = typer.Argument(..., help="Artifact directories, or one ONNX model with --profile."),
    json_out: bool = JsonOption,
    threads: int = typer.Option(None, "--threads", min=1, help="Threads for the runtime."),
    runs: int = typer.Option(50, "--runs", min=1, help="Minimum timed runs per artifact."),
    min_seconds: float = typer.Option(2.0, "--min-seconds", min=0, help="Minimum timed seconds per artifact."),
    warmup: int = typer.Option(10, "--warmup", min=0, help="Warm-up runs (not timed)."),
    inputs: Path = typer.Option(None, "--inputs", help=".npz with one array per input (the timings use sample 0)."),
    outputs: Path = typer.Option(None, "--outputs", help="Also write the outputs for --inputs to this .npz (one "
                                 "artifact), to diff with a device's 'remote-bench --outputs'."),
    db: Path = typer.Option(None, "--db", help="Results store (default: $EDGEOPT_DATA_DIR/results.db)."),
    no_store: bool = typer.Option(False, "--no-store", help="Do not record the runs."),
    per_layer: bool = typer.Option(False, "--per-layer", help="Per-op times from the backend's profiler."),
    memory: bool = typer.Option(False, "--memory", help="Measure each artifact's peak resident memory (load, first "
                                "inference, steady state) in a child process, beside its predicted peak."),
    streams: str = StreamsOption,
    batch: int = BatchOption,
    throughput_seconds: float = typer.Option(None, "--throughput-seconds", min=0.1,
                                             help="Seconds for each throughput measurement (default: --min-seconds, at least 1)."),
    price_per_kwh: float = typer.Option(0.30, "--price-per-kwh", min=0, help="Electricity price for cost/1k."),
    profile: str = typer.Option(None, "--profile", help="Device profile (TDP for energy; required for a model)."),
    label: list[str] = typer.Option(None, "--label", help="Tag the runs: KEY=VALUE (e.g. stage=int8), repeatable."),
    backends: str = typer.Option("all", "--backends", help="With a model: 'all' or e.g. onnxruntime,openvino."),
    calib: Path = CalibOption,
    eval_data: Path = typer.Option(None, "--eval", help="With a model: labelled data for accuracy."),
    precision: str = chain_option("precision", context="With a model: "),
    metric: str = MetricOption,
    metric_axis: int = MetricAxisOption,
    ctc_blank: int = CtcBlankOption,
    metric_threshold: float = MetricThresholdOption,
) -> None:
    """Measure artifacts side by side (interleaved), or convert a model for each backend and measure all."""
    from edgeopt.bench.api import BenchOptions, bench_artifacts
    from edgeopt.bench.model import bench_model
    from edgeopt.bench.table import render, summary_row
    opts = BenchOptions(threads=threads, min_runs=runs, min_seconds=min_seconds, warmup=warmup, streams=streams,
                        batch=batch, throughput_seconds=throughput_seconds,
                        inputs=str(inputs) if inputs else None, outputs=str(outputs) if outputs else None,
                        per_layer=per_layer, price_per_kwh=price_per_kwh, memory=memory,
                        profile=profile, labels=_labels(label), store=not no_store, db=str(db) if db else None)

    def prog(frac: float) -> None:
        if json_out:
            sys.stderr.write(_json.dumps({"progress": frac}) + "\n")

    from edgeopt.converters.registry import model_file_backend
    from edgeopt.wrapped_artifact import wrapped_model_file

    # a backend's own model file (a .tflite) is wrapped as an artifact of that backend
    targets = [wrapped_model_file(t) if not t.is_dir() and model_file_backend(t) else t for t in targets]
    is_model = len(targets) == 1 and targets[0].suffix.lower() == ".onnx" and not targets[0].is_dir()
    if is_model:
        if not profile:
            raise UsageError("benchmarking a model needs --profile", "e.g. edgeopt bench model.onnx --profile host")
        result = bench_model(targets[0], profile, backends=backends, calib=str(calib) if calib else None,
                             eval_data=str(eval_data) if eval_data else None, precision=precision, options=opts,
                             progress=prog, metric=metric_spec(metric, metric_axis, ctc_blank, metric_threshold, None))
    else:
        result = bench_artifacts([str(t) for t in targets], opts, progress=prog)
    payload = {"table": [summary_row(r) for r in result["rows"]], **result}
    def human(c) -> None:
        render(c, result)
        from edgeopt.bench.early_exit import early_exit_text
        from edgeopt.memory.bench_row import memory_text

        for r in result["rows"]:
            if r.get("memory"):
                c.print(memory_text(r.get("name") or "", r["memory"]), markup=False)
            if r.get("early_exit"):
                c.print(early_exit_text(r.get("name") or "", r["early_exit"]), markup=False)

    emit(json_out, payload, human)
