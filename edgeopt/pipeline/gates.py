"""Gate checks of one built target: accuracy drop, p99 latency, artifact size, RAM.

Each gate result says where its figure came from: ``validation`` (the artifact's own validation),
``measured`` (the local benchmark), ``estimated`` (the roofline of ``edgeopt analyze``: no
percentiles, labelled), or ``file sizes``. A gate whose figure can't be had fails (a gate you
asked for is never silently skipped).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from edgeopt.pipeline.recipe import Gates, LatencySource
from edgeopt.validation_model import Validation, counted_drop, holds_bound


class GateResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gate: str
    threshold: float
    value: float | None
    unit: str
    source: str
    passed: bool

    def line(self) -> str:
        got = "unknown" if self.value is None else f"{self.value:.4g}"
        figure = self.gate.removeprefix("max_")
        return f"{figure} {got} {self.unit} > {self.threshold:g} {self.unit} ({self.source})" if self.value is not None \
            else f"{figure} could not be measured ({self.source})"


def estimate(reference_model, profile, precision: str, input_shapes, artifact_bytes: int) -> dict:
    """Roofline latency and a RAM lower bound for the target (estimates, labelled as such)."""
    from edgeopt.analyze import analyze_model
    from edgeopt.enums import Precision

    a = analyze_model(str(reference_model), profile, input_shapes or None, preflight=False)
    p = a.prediction(a.primary_unit, Precision(precision)) or a.prediction(a.primary_unit, Precision.FP32)
    return {"latency_ms": round(p.estimate_ms, 6) if p else None,
            "ram_mb": round((artifact_bytes + a.totals.peak_activation_bytes) / 2**20, 4),
            "note": "estimates: roofline latency of edgeopt analyze (no percentiles); RAM = artifact files + "
                    "largest op's activations (a lower bound)"}


def measured_here_for(target_profile: str | None) -> bool:
    """A local benchmark measures the target only when the target is this host (like for like)."""
    return target_profile in (None, "host")


def check(gates: Gates, *, validation: Validation | None, bench: dict | None, est: dict | None,
          artifact_bytes: int, target_profile: str | None = None) -> list[GateResult]:
    out: list[GateResult] = []
    if gates.max_accuracy_drop is not None:
        v = validation
        value, vs_fp32 = counted_drop(v)  # the one rule: vs labels, else vs FP32 on real data
        src = f"validation on {v.samples} {v.data_source} samples" if v is not None and value is not None \
            else "no labelled eval data: give data.eval with 'labels'"
        if v is not None and v.metric and value is not None:
            src += f", {v.metric}" + (" (no labels: vs FP32)" if vs_fp32 else "")
        unit = "dB" if v is not None and v.metric_unit == "dB" else "pts"
        out.append(GateResult(gate="max_accuracy_drop", threshold=gates.max_accuracy_drop, value=value, unit=unit,
                              source=src, passed=holds_bound(v, gates.max_accuracy_drop)))
    if gates.max_p99_latency_ms is not None:
        like = measured_here_for(target_profile)
        use_measured = gates.latency_source == LatencySource.MEASURED or (
            gates.latency_source == LatencySource.AUTO and bench is not None and like)
        if use_measured and bench and not like:  # this host's p99 says nothing about the target's
            value = None
            src = (f"measured on this host, not on '{target_profile}': a figure from another device is not "
                   "compared (latency_source: estimated, or remote-bench on the device)")
        elif use_measured:
            value = bench["p99_ms"] if bench else None
            src = f"measured p99, {bench['runs']} runs" if bench else "not benchmarked: run with --bench local"
        else:
            value = (est or {}).get("latency_ms")
            src = "estimated: roofline, not a p99" if value is not None else "no estimate available"
        out.append(GateResult(gate="max_p99_latency_ms", threshold=gates.max_p99_latency_ms, value=value, unit="ms",
                              source=src, passed=value is not None and value <= gates.max_p99_latency_ms))
    if gates.max_artifact_kb is not None:
        kb = round(artifact_bytes / 1024, 3)
        out.append(GateResult(gate="max_artifact_kb", threshold=gates.max_artifact_kb, value=kb, unit="KiB",
                              source="artifact files", passed=kb <= gates.max_artifact_kb))
    if gates.max_ram_mb is not None:
        if bench is not None and bench.get("load_rss_mb") is not None:
            value, src = bench["load_rss_mb"], "measured: process RSS growth when loading the artifact"
        else:
            value = (est or {}).get("ram_mb")
            src = "estimated: artifact files + peak activations" if value is not None else "no estimate available"
        out.append(GateResult(gate="max_ram_mb", threshold=gates.max_ram_mb, value=value, unit="MiB", source=src,
                              passed=value is not None and value <= gates.max_ram_mb))
    return out
