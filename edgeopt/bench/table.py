"""The side-by-side table of a bench (rich), and the compact JSON rows behind it."""

from __future__ import annotations

from edgeopt.identity import describe
from edgeopt.runtime.environment import interference_warning


def _fmt(x, spec: str = ".3f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def summary_row(r: dict) -> dict:
    """The figures one table row shows (also in ``--json`` under ``table``)."""
    if r.get("status") == "failed":
        return {"name": r["name"], "backend": r.get("backend"), "status": "failed", "error": r.get("error")}
    lat = r["latency_ms"]
    val = r.get("validation") or {}
    ef = r.get("energy_figures") or {}
    return {
        "name": r["name"],
        "backend": r.get("backend"),
        "precision": r.get("precision"),
        "status": "ok",
        "best": bool(r.get("best")),
        "p50_ms": lat["p50"], "p90_ms": lat["p90"], "p99_ms": lat["p99"],
        "ci95_ms": [lat["ci95_low"], lat["ci95_high"]],
        "runs": r["runs"],
        "stop_rule": r.get("stop_rule"),
        "throughput_qps": r.get("throughput_qps"),
        "throughput_parallel_qps": ((r.get("throughput") or {}).get("parallel") or {}).get("throughput_qps"),
        "throughput_batched_qps": ((r.get("throughput") or {}).get("batched") or {}).get("throughput_qps"),
        "peak_rss_mb": r.get("peak_rss_mb"),
        "load_rss_mb": r.get("load_rss_mb"),
        "accuracy": val.get("accuracy"),
        "accuracy_drop": val.get("accuracy_drop"),
        "metric": val.get("metric"),  # what "accuracy" is (edgeopt.metrics), e.g. top1_accuracy
        "energy_j": ef.get("joules_per_inference"),
        "cost_per_1k": ef.get("cost_per_1k_queries"),
        "energy_source": ef.get("source"),
        "synthetic_inputs": (r.get("inputs") or {}).get("synthetic"),
        "run_id": r.get("run_id"),
    }


def _wide(console, table, width: int) -> None:
    """Print ``table`` at least ``width`` wide (a pipe's default 80 columns would squeeze it unreadable)."""
    old = console.width
    console.width = max(old, width)
    try:
        console.print(table)
    finally:
        console.width = old


def describe_throughput(block: dict | None) -> tuple[str, str, str]:
    """(q/s, x single stream, how) for a parallel or batched throughput block."""
    if not block:
        return "-", "-", "not asked"
    if block.get("error") or block.get("supported") is False:
        return "-", "-", (block.get("error") or (block.get("reason") or "").split(" (")[0])[:70]
    if block["mode"] == "batched":
        how = f"batch {block['batch']}"
    elif block.get("how"):  # a runtime's own throughput mode says how it ran
        how = block["how"]
    elif "infer_requests" in block:
        how = f"{block['streams']} streams, {block['infer_requests']} requests"
    else:
        how = f"{block['streams']} streams x {block['threads_per_stream']} threads"
    return _fmt(block.get("throughput_qps"), ".1f"), _fmt(block.get("speedup_vs_single_stream"), ".2f"), how


def _throughput_table(console, rows: list[dict]) -> None:
    shown = [r for r in rows if r.get("status") != "failed" and r.get("throughput")]
    if not shown:
        return
    from rich.table import Table

    t = Table(title="throughput (measured after the latencies, one artifact at a time)")
    for col in ("artifact", "1 stream q/s", "parallel q/s", "x", "how", "batched q/s", "x", "how"):
        t.add_column(col, justify="left" if col in ("artifact", "how") else "right")
    for r in shown:
        tp = r["throughput"]
        t.add_row(r["name"], _fmt(tp.get("single_stream_qps"), ".1f"), *describe_throughput(tp.get("parallel")),
                  *describe_throughput(tp.get("batched")))
    _wide(console, t, 160)


def render(console, result: dict) -> None:
    from rich.table import Table

    rows = [summary_row(r) for r in result["rows"]]
    est = any(r.get("energy_source") == "estimated" for r in rows)
    t = Table(title="edgeopt bench (median and distribution-free 95 % CI of the median; interleaved)")
    for col in ("artifact", "backend", "prec", "p50 ms", "95% CI", "p90", "p99", "runs", "q/s", "+RSS MB",
                "acc %", "J/inf" + (" (est.)" if est else ""), "cost/1k" + (" (est.)" if est else "")):
        t.add_column(col, justify="left" if col in ("artifact", "backend", "prec") else "right")
    for r in rows:
        if r["status"] == "failed":
            t.add_row(r["name"], r["backend"] or "-", "-", f"[red]failed: {r['error']}[/]", *[""] * 9)
            continue
        name = f"[bold green]{r['name']} *best*[/]" if r["best"] else r["name"]
        acc = _fmt(r["accuracy"], ".2f") + (f" ({-r['accuracy_drop']:+.2f})" if r.get("accuracy_drop") is not None else "")
        t.add_row(name, r["backend"] or "-", r["precision"] or "-", _fmt(r["p50_ms"]),
                  f"{r['ci95_ms'][0]:.3f}-{r['ci95_ms'][1]:.3f}", _fmt(r["p90_ms"]), _fmt(r["p99_ms"]), str(r["runs"]),
                  _fmt(r["throughput_qps"], ".1f"), _fmt(r["load_rss_mb"], ".1f"), acc, _fmt(r["energy_j"], ".2e"),
                  _fmt(r["cost_per_1k"], ".2e"))
    _wide(console, t, 160)
    metrics = sorted({r["metric"] for r in rows if r.get("accuracy") is not None and r.get("metric")})
    if metrics:
        console.print(f"acc %: {', '.join(metrics)} (the artifact's validation, against labels)", markup=False)
    _throughput_table(console, result["rows"])
    env = result.get("environment") or {}
    console.print(f"environment: {env.get('cpu', {}).get('model')} cores {env.get('cores_used')} load "
                  f"{env.get('load_before')} -> {env.get('load_after')}; {env.get('location')}")
    ident = next((r["identity"] for r in result["rows"] if r.get("identity")), None)
    if ident:
        built = sorted({r["identity"].get("built_for") or "no target profile" for r in result["rows"] if r.get("identity")})
        console.print(f"measured on {describe({**ident, 'built_for': None})}; artifacts built for "
                      f"{', '.join(built)}", markup=False)
    busy = interference_warning(env)
    if busy:
        console.print(f"[yellow]{busy}[/]")
    for w in dict.fromkeys(w for r in result["rows"] for w in r.get("warnings") or [] if w != busy):
        console.print(f"warning: {w}", style="yellow", markup=False)
    console.print("+RSS MB: resident memory added by loading the artifact (0 when its runtime was already loaded)")
    if any(r.get("synthetic_inputs") for r in rows):
        console.print("inputs: synthetic (random at the manifest's shapes); pass --inputs NPZ for real data")
    for r in rows:
        if r.get("stop_rule") and r["stop_rule"] != "min_runs_and_min_seconds":
            console.print(f"[yellow]{r['name']}: stopped by {r['stop_rule']} before both minimums were met[/]")
    if est:
        console.print("energy/cost: estimated from the profile's TDP x CPU utilisation (no power meter here)")
    for r in result["rows"]:
        for line in execution_lines(r):
            console.print(line, markup=False)
    for r in result["rows"]:
        pl = r.get("per_layer")
        if not pl:
            continue
        console.print(f"\nper-layer {r['name']}: {pl.get('note')}")
        if pl.get("available"):
            pt = Table("op", "type", "measured us", "roofline us (est.)", "measured/predicted")
            for op in pl["ops"][:15]:
                pt.add_row(op["name"][:40], op["op_type"][:24], _fmt(op["measured_us"], ".1f"),
                           _fmt(op.get("predicted_us"), ".2f"), _fmt(op.get("measured_over_predicted"), ".1f"))
            _wide(console, pt, 120)


def execution_lines(r: dict) -> list[str]:
    """Where an artifact ran when it is not where it was built for, and how (CUDA: Q/DQ as float with Q/DQ
    kernels); an accelerator artifact's placement in one line."""
    out = []
    ex = r.get("execution") or {}
    if ex.get("why") or ex.get("runs_as"):
        how = f" {ex['runs_as']}" if ex.get("runs_as") else ""
        out.append(f"{r.get('name')}: ran on {ex.get('provider')}{how}, built for {ex.get('target_provider')}" +
                   (f" ({ex['why']})" if ex.get("why") else ""))
    if (r.get("placement") or {}).get("target_unit", "cpu") != "cpu":  # an accelerator's artifact: op -> unit
        from edgeopt.placement import placement_line

        out.append(f"{r.get('name')}: {placement_line(r['placement'])}")
    return out
