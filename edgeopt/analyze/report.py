"""Readable rich tables of an :class:`AnalysisResult` (every title says "estimate")."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edgeopt.analyze.result import AnalysisResult, Severity


def _si(n: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.0f} {unit}"


def _ms(x: float) -> str:
    return f"{x:.3f}" if x >= 0.01 else f"{x * 1000:.2f} us"


def render(result: AnalysisResult, console: Console, top: int | None = None) -> None:
    t = result.totals
    console.print(f"[bold]{escape(result.model)}[/] on profile [bold]{result.profile}[/]"
                  + (" (detected from this machine)" if result.profile_detected else ""))
    shapes = ", ".join(f"{i.name}{i.shape}" for i in result.inputs)
    console.print(escape(f"inputs: {shapes}; shapes from {result.shape_source}"))

    tot = Table(title="Model totals", show_header=False)
    tot.add_column("what")
    tot.add_column("value", justify="right")
    tot.add_row("nodes", f"{t.nodes}")
    tot.add_row("compute", f"{_si(t.flops, 'FLOP')} ({_si(t.macs, 'MAC')})")
    tot.add_row("parameters", f"{_si(t.params, '')} ({_si(t.param_bytes, 'B')})")
    tot.add_row("activations written", _si(t.activation_bytes, "B"))
    tot.add_row("memory traffic fp32 / int8", f"{_si(t.bytes_fp32, 'B')} / {_si(t.bytes_int8, 'B')}")
    tot.add_row("arithmetic intensity", f"{t.intensity:.2f} FLOP/B")
    tot.add_row("params + peak activations vs device memory", f"{t.memory_share:.2%} of {_si(t.memory_bytes, 'B')}")
    console.print(tot)

    units = "; ".join(f"{u.value} = {n}" for u, n in dict((p.unit, p.unit_name) for p in result.predictions).items())
    pred = Table(title="Predicted latency per compute unit (estimate, roofline)", caption=escape(units))
    for col in ("unit", "prec.", "peak GOPS", "GB/s", "roofline ms", "mem-bound", "estimate ms"):
        pred.add_column(col, justify="right" if col not in ("unit", "prec.") else "left")
    for p in result.predictions:
        eff = "" if p.efficiency == 1 else f" (eff {p.efficiency:g})"
        pred.add_row(p.unit.value, p.precision.value, f"{p.peak_gops:g}", f"{p.bandwidth_gbps:g}",
                     _ms(p.roofline_ms), f"{p.memory_bound_share:.0%}", _ms(p.estimate_ms) + eff)
    console.print(pred)

    heavy = result.heaviest[:top] if top is not None else result.heaviest
    ops = Table(title=f"Top {len(heavy)} ops by time on {result.primary_unit.value} (estimate)")
    for col in ("op", "type", "FLOPs", "bytes", "FLOP/B", "time us", "bound"):
        ops.add_column(col, justify="left" if col in ("op", "type", "bound") else "right")
    for o in heavy:
        ops.add_row(escape(o.name[:40]), escape(o.op_type) + (" (dw)" if o.depthwise else ""), _si(o.flops, ""), _si(o.bytes_fp32, "B"),
                    f"{o.intensity:.2f}", f"{o.time_us:.2f}", o.bound.value)
    console.print(ops)

    types = Table(title="Time by op type (estimate)")
    for col in ("type", "count", "FLOPs", "bytes", "share"):
        types.add_column(col, justify="left" if col == "type" else "right")
    for r in result.op_types[:12]:
        types.add_row(escape(r.op_type), str(r.count), _si(r.flops, ""), _si(r.bytes_fp32, "B"), f"{r.time_share:.1%}")
    console.print(types)

    if result.recommendations:
        rec = Table(title="Recommendations (gains are estimates)")
        rec.add_column("recommendation")
        rec.add_column("expected gain")
        rec.add_column("why")
        for r in result.recommendations:
            rec.add_row(f"[bold]{escape(r.title)}[/]", escape(r.expected_gain), escape(r.detail))
        console.print(rec)
    else:
        console.print("No recommendations: nothing stands out in the roofline numbers.")

    if result.preflight:
        pf = Table(title="Pre-flight (what each backend of the profile would refuse)")
        pf.add_column("backend")
        pf.add_column("severity")
        pf.add_column("finding")
        colour = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "green"}
        for i in result.preflight:
            name = f"{i.backend.value}/{i.unit.value}" if i.backend else "model"
            pf.add_row(name, f"[{colour[i.severity]}]{i.severity.value}[/]", escape(i.message))
        console.print(pf)
    console.print("[dim]estimate ms = roofline / efficiency + per-op dispatch overhead (see notes)[/]")
    for n in result.notes:
        console.print(f"[dim]note: {escape(n)}[/]")
