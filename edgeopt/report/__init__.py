"""``edgeopt report``: one self-contained HTML file from stored runs.

Charts are matplotlib PNGs embedded as base64 ``data:`` URIs; there are no scripts, stylesheets
or images from elsewhere, so the file can be mailed or attached to CI as-is. Written atomically.
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from edgeopt.errors import BadInputError
from edgeopt.files import write_text_atomic
from edgeopt.identity import identity_of
from edgeopt.runtime.environment import interference_warning

DEFAULT_LATEST = 20

_CSS = """body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#eee}td.l{text-align:left}.note{color:#666;font-size:13px}img{max-width:100%}
.banner{background:#fff3cd;border:2px solid #d39e00;padding:8px 12px;margin:1em 0;font-weight:bold}
tr.emulated td{font-style:italic;background:#fff8e6}"""
MAX_ROOFLINES = 4


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _fmt(x, spec=".4f") -> str:
    return "-" if x is None else format(x, spec)


def _runs_table(runs: list[dict]) -> str:
    head = ("id", "created", "model", "backend", "precision", "measured on", "location", "CPU", "built for", "stage",
            "p50 ms", "95% CI", "p90", "p99", "runs", "q/s", "q/s parallel", "accuracy", "J/inference", "inputs")
    rows = []
    for r in runs:
        res = r["result"]
        lat = res["latency_ms"]
        ef = res.get("energy_figures") or {}
        j = ef.get("joules_per_inference")
        par = (res.get("throughput") or {}).get("parallel") or {}
        par_qps = "-" if not par.get("throughput_qps") else f"{par['throughput_qps']:.1f} ({par.get('streams')} streams)"
        where = f"emulated on {r['emulated_on']}" if r.get("emulated_on") else r["location"]
        cells = [r["id"], r["created"][:19], r["model"], r["backend"], r["precision"], r["device"], where,
                 r.get("cpu_model"), r.get("built_for"), r["stage"], _fmt(lat["p50"]), f"{_fmt(lat['ci95_low'])}-{_fmt(lat['ci95_high'])}", _fmt(lat["p90"]),
                 _fmt(lat["p99"]), res.get("runs"), _fmt(res.get("throughput_qps"), ".1f"), par_qps,
                 _fmt((res.get("validation") or {}).get("accuracy"), ".2f"),
                 "-" if j is None else f"{j:.2e} ({ef.get('source')})",
                 "synthetic" if (res.get("inputs") or {}).get("synthetic") else "data"]
        rows.append(("<tr class=\"emulated\">" if r["location"] == "emulated" else "<tr>")
                    + "".join(f'<td class="l">{html.escape(str(c if c is not None else "-"))}</td>'
                                     if i < 10 else f"<td>{html.escape(str(c))}</td>" for i, c in enumerate(cells)) + "</tr>")
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def _roofline_section(runs: list[dict]) -> tuple[str, list[str]]:
    """(html, notes): one roofline per machine the runs were measured on, with the roofs of the profile
    stored for that machine (``identity.profile``: the host's for a local run, the device's otherwise)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        ident = identity_of(r["result"])
        groups.setdefault((ident.get("profile") or "host", r["device"], r["location"]), []).append(r)
    parts, notes = [], []
    for i, ((profile, device, location), group) in enumerate(groups.items()):
        if i == MAX_ROOFLINES:
            notes.append(f"rooflines shown for the first {MAX_ROOFLINES} machines only")
            break
        roof, note = _roofline(group, profile, f"{device} ({location})")
        parts.append(roof or f'<p class="note">{html.escape(note or "")}</p>')
        if note:
            notes.append(note)
    return "".join(parts), notes


def _roofline(runs: list[dict], profile: str, where: str) -> tuple[str, str | None]:
    """(html, note): roofline of the runs' model on ``profile`` with their measured points."""
    from edgeopt.report import plots

    model = next((r["result"].get("model") for r in runs if r["result"].get("model")), None)
    if not model or not Path(model).is_file():
        return "", f"roofline for {where} omitted: the runs' source model file is not available here"
    try:
        from edgeopt.analyze import analyze_model
        from edgeopt.profiles import load_profile

        analysis = analyze_model(model, load_profile(profile), preflight=False)
    except Exception as err:  # noqa: BLE001 - the section is optional
        return "", (f"roofline for {where} omitted: analysis on profile '{profile}' unavailable "
                    f"({type(err).__name__}: {str(err)[:120]})")
    flops, intensity = analysis.totals.flops, analysis.totals.intensity
    points = []
    for r in runs:
        if r["model"] != Path(model).name:
            continue
        p50 = r["result"]["latency_ms"]["p50"]
        emulated = plots.is_emulated(r)
        points.append({"label": f"#{r['id']} {r['backend']} {r['precision']} (whole model, "
                                f"{'emulated' if emulated else 'measured'})",
                       "intensity": intensity, "gops": flops / (p50 * 1e6), "whole_model": True, "run": r["id"],
                       "emulated": emulated})
        per_layer = r["result"].get("per_layer") or {}
        costs = {o.name: o for o in analysis.ops}
        first = True
        for op in per_layer.get("ops") or []:
            c = costs.get(op["name"])
            if c and c.flops > 0 and op["measured_us"] > 0:
                points.append({"label": f"#{r['id']} ops (measured, --per-layer)" if first else None, "run": r["id"],
                               "intensity": c.intensity, "gops": c.flops / (op["measured_us"] * 1e3),
                               "emulated": emulated})
                first = False
    png = plots.roofline(analysis, points, where)
    return _img(png, f"roofline on {profile}, measured on {where}"), None


def _banner(runs: list[dict]) -> list[str]:
    """What a reader must know before reading any number: emulated runs, busy machines, several devices."""
    lines = []
    emulated = [r for r in runs if r["location"] == "emulated"]
    if emulated:
        hosts = sorted({str(r.get("emulated_on") or "this host") for r in emulated})
        lines.append(f"{len(emulated)} of {len(runs)} runs are EMULATED (qemu/loopback on {', '.join(hosts)}): "
                     f"their timings are not the board's speed (runs {', '.join(str(r['id']) for r in emulated)}).")
    busy = [r for r in runs if interference_warning(r["result"].get("environment") or {})]
    if busy:
        lines.append(f"{len(busy)} of {len(runs)} runs were measured on a busy machine (other processes or guests "
                     f"took 10 % or more of the CPUs): expect noisier figures (runs "
                     f"{', '.join(str(r['id']) for r in busy)}).")
    where = sorted({f"{r['device']} ({r['location']})" for r in runs})
    if len(where) > 1:
        lines.append(f"These runs were measured on {len(where)} different machines: {', '.join(where)}. Compare "
                     "figures only within one machine.")
    return lines


def build_report(output: str | os.PathLike, run_ids: list[int] | None = None, db=None) -> dict:
    """Write the report for ``run_ids`` (default: the latest runs) and return what it holds."""
    from edgeopt.report import plots
    from edgeopt.results import get_runs, list_runs

    if run_ids:
        runs = get_runs(run_ids, db)
    else:
        latest = list_runs(db)[-DEFAULT_LATEST:]
        runs = get_runs([r["id"] for r in latest], db) if latest else []
    if not runs:
        raise BadInputError("the results store has no runs to report", "run edgeopt bench first")
    out = Path(output)
    if not out.parent.exists():
        raise BadInputError(f"-o: directory '{out.parent}' does not exist", "create it first")
    sections, notes = [], []
    sections.append("<h2>Runs</h2>" + _runs_table(runs))
    sections.append("<h2>Latency distributions</h2>" + _img(plots.latency_distributions(runs), "latency distributions"))
    exits = plots.exit_latencies(runs)
    if exits is not None:
        sections.append("<h2>Early exits: latency per exit</h2>" + _img(exits, "latency per exit"))

    roof, roof_notes = _roofline_section(runs)
    sections.append("<h2>Roofline</h2>" + roof)
    notes += roof_notes

    stage_rows = plots.stage_rows(runs)
    if stage_rows:
        sections.append("<h2>Optimisation waterfall</h2>" + _img(plots.waterfall(stage_rows), "waterfall"))
    else:
        note = "waterfall omitted: no run carries a stage label (edgeopt bench --label stage=fp32|fused|pruned|int8|tuned)"
        sections.append(f'<h2>Optimisation waterfall</h2><p class="note">{note}</p>')
        notes.append(note)

    histories = 0
    all_rows = list_runs(db)
    for model, device, location in sorted({(r["model"], r["device"], r["location"]) for r in runs}, key=str):
        ids = [r["id"] for r in all_rows if (r["model"], r["device"], r["location"]) == (model, device, location)]
        hist = get_runs(ids, db)  # one machine and one location kind: like for like
        where = f"{device} ({location})"
        sections.append(f"<h2>History: {html.escape(str(model))} measured on {html.escape(where)}</h2>"
                        + _img(plots.history(hist, f"{model} measured on {where}: {len(hist)} runs"), "history"))
        histories += 1

    env = runs[-1]["result"].get("environment") or {}
    banner_lines = _banner(runs)
    banner = "".join(f'<div class="banner">{html.escape(line)}</div>' for line in banner_lines)
    page = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>edgeopt report</title><style>{_CSS}</style>"
            f"</head><body><h1>edgeopt report</h1>{banner}<p class=\"note\">{len(runs)} runs. Latencies are medians with a "
            "distribution-free 95 % CI; energy marked 'estimated' comes from the profile's TDP; roofline figures are "
            f"estimates. Last run's environment: {html.escape(str(env.get('cpu', {}).get('model')))}, "
            f"{html.escape(str(env.get('location')))}, load {html.escape(str(env.get('load_before')))}.</p>"
            + "".join(f"<p class=\"note\">Run {r['id']}: {html.escape(w)}.</p>" for r in runs
                      if (w := interference_warning(r["result"].get("environment") or {})))
            + "".join(sections) + "</body></html>")
    write_text_atomic(out, page)
    return {"output": str(out), "runs": [r["id"] for r in runs], "waterfall_stages": [s["stage"] for s in stage_rows],
            "histories": histories, "roofline": "<img" in roof, "rooflines": roof.count("<img"),
            "early_exit_runs": [r["id"] for r in runs if (r["result"].get("early_exit") or {}).get("per_sample_ms")],
            "banner": banner_lines, "emulated_runs": [r["id"] for r in runs if r["location"] == "emulated"],
            "notes": notes, "bytes": out.stat().st_size}
