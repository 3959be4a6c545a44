"""The report's charts (matplotlib, Agg), each returned as PNG bytes."""

from __future__ import annotations

import io
from datetime import datetime

from edgeopt.deps import require

STAGE_ORDER = ("fp32", "fused", "pruned", "int8", "tuned")
MAX_POINTS = 20_000  # per run in a distribution plot (evenly thinned beyond that)


def _figure(w: float = 9, h: float = 5):
    matplotlib = require("matplotlib", "the HTML report")
    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h))


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def is_emulated(run: dict) -> bool:
    return run.get("location") == "emulated"


def run_label(run: dict) -> str:
    """``#3 name / backend precision / machine location``: every label says where it was measured."""
    r = run["result"]
    name = r.get("name") or run.get("backend")
    return (f"#{run['id']} {name}\n{run.get('backend')} {run.get('precision') or ''}\n"
            f"{run.get('device')} {run.get('location')}").strip()


def latency_distributions(runs: list[dict]) -> bytes:
    """Violin + box of each run's per-run latencies (ms, log scale when they span > 10x)."""
    import numpy as np

    data, labels = [], []
    for run in runs:
        s = np.asarray(run["result"].get("samples_ms") or [], float)
        if s.size == 0:
            continue
        if s.size > MAX_POINTS:
            s = np.sort(s)[np.linspace(0, s.size - 1, MAX_POINTS).astype(int)]
        data.append(s)
        labels.append(run_label(run))
    fig = _figure(max(6, 1.6 * len(data) + 2), 5)
    ax = fig.add_subplot(1, 1, 1)
    log = False
    if data:
        pos = list(range(1, len(data) + 1))
        lo, hi = min(float(d.min()) for d in data), max(float(d.max()) for d in data)
        log = lo > 0 and hi / lo > 10
        shown = [np.log10(d) for d in data] if log else data  # densities drawn in the axis' own scale
        bodies = ax.violinplot(shown, positions=pos, showextrema=False)["bodies"]
        for body, run in zip(bodies, [r for r in runs if (r["result"].get("samples_ms") or [])], strict=True):
            if is_emulated(run):  # hollow and hatched: not the board's speed
                body.set_facecolor("none")
                body.set_edgecolor("tab:orange")
                body.set_hatch("//")
        ax.boxplot(shown, positions=pos, widths=0.15, showfliers=False)
        ax.set_xticks(pos)
        ax.set_xticklabels(labels, fontsize=7)
        if log:
            ticks = np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
            ax.set_yticks(ticks)
            ax.set_yticklabels([f"{10 ** t:g}" for t in ticks])
    ax.set_ylabel("latency per inference (ms" + (", log scale)" if log else ")"))
    ax.set_title("Latency distribution per run (violin: all runs; box: quartiles, whiskers 1.5 IQR)\n"
                 "labels name where each ran; hatched: emulated, not the board's speed", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def exit_latencies(runs: list[dict]) -> bytes | None:
    """Per early-exit run (``bench --inputs`` of a cascade): a box per exit of the latencies of the samples that
    left there, with the worst case (every stage and head) and the plain model's time as lines; None: no such run."""
    import numpy as np

    rows = [r for r in runs if (r["result"].get("early_exit") or {}).get("per_sample_ms")]
    if not rows:
        return None
    fig = _figure(max(6, 3.2 * len(rows) + 1), 4.5)
    for i, run in enumerate(rows, 1):
        ee = run["result"]["early_exit"]
        ms, exits = np.asarray(ee["per_sample_ms"], float), np.asarray(ee["per_sample_exit"], int)
        last = int(ee.get("stages") or exits.max() + 1) - 1
        ax = fig.add_subplot(1, len(rows), i)
        ks = [k for k in range(last + 1) if (exits == k).any()]
        ax.boxplot([ms[exits == k] for k in ks], positions=list(range(1, len(ks) + 1)), widths=0.5)
        ax.set_xticks(list(range(1, len(ks) + 1)))
        ax.set_xticklabels([f"{'full' if k == last else f'exit {k}'}\n{(exits == k).mean():.0%}" for k in ks],
                           fontsize=7)
        for value, style, what in ((ee.get("worst_case_ms"), "--", "worst case"),
                                   (ee.get("plain_mean_ms") or ee.get("plain_ms_at_convert"), ":", "plain model")):
            if value:
                ax.axhline(value, linestyle=style, color="tab:red" if what == "worst case" else "tab:gray",
                           label=f"{what} {value:.3g} ms")
        ax.axhline(ee["mean_ms"], color="tab:green", label=f"mean {ee['mean_ms']:.3g} ms")
        ax.set_title(run_label(run), fontsize=8)
        ax.set_ylabel("latency per sample (ms)")
        ax.legend(fontsize=6)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Early exits: each sample's latency by the exit it left at (share under each)", fontsize=9)
    return _png(fig)


def stage_rows(runs: list[dict]) -> list[dict]:
    """The latest run of each ``stage`` label, in optimisation order (unknown stages last)."""
    latest: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: r["id"]):
        stage = run.get("stage") or (run["result"].get("labels") or {}).get("stage")
        if stage:
            latest[stage] = run
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
    rows = []
    for stage, run in sorted(latest.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[1]["id"])):
        val = run["result"].get("validation") or {}
        rows.append({"stage": stage, "run_id": run["id"], "p50_ms": run["result"]["latency_ms"]["p50"],
                     "accuracy": val.get("accuracy"), "backend": run.get("backend"), "precision": run.get("precision")})
    return rows


def waterfall(rows: list[dict]) -> bytes:
    """Latency per optimisation stage (bars, with the step change) and accuracy (line, right axis)."""
    fig = _figure(max(6, 1.4 * len(rows) + 2), 5)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(rows)))
    lat = [r["p50_ms"] for r in rows]
    bars = ax.bar(xs, lat, color="tab:blue", alpha=0.7)
    for i, b in enumerate(bars):
        step = "" if i == 0 else f" ({lat[i] / lat[i - 1] - 1:+.0%})"
        ax.annotate(f"{lat[i]:.3g} ms{step}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['stage']}\n#{r['run_id']}" for r in rows], fontsize=8)
    ax.set_ylabel("median latency (ms)")
    acc = [r["accuracy"] for r in rows]
    if any(a is not None for a in acc):
        ax2 = ax.twinx()
        ax2.plot([x for x, a in zip(xs, acc, strict=True) if a is not None], [a for a in acc if a is not None],
                 "o-", color="tab:red")
        ax2.set_ylabel("accuracy (top-1 %)", color="tab:red")
    ax.set_title("Optimisation waterfall: median latency (bars) and accuracy (red) per stage", fontsize=9)
    return _png(fig)


def history(runs: list[dict], title: str) -> bytes:
    """Median latency with its 95 % CI over time, one line per backend/precision."""
    fig = _figure(9, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    series: dict[str, list] = {}
    for run in sorted(runs, key=lambda r: r["created"]):
        lat = run["result"]["latency_ms"]
        key = f"{run.get('backend')} {run.get('precision') or ''} ({run.get('device')}, {run.get('location')})"
        series.setdefault(key, []).append((datetime.fromisoformat(run["created"]), lat["p50"],
                                           lat["p50"] - lat["ci95_low"], lat["ci95_high"] - lat["p50"]))
    for key, pts in series.items():
        hollow = key.endswith(", emulated)")
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[[p[2] for p in pts], [p[3] for p in pts]],
                    marker="o", capsize=3, label=key, mfc="none" if hollow else None,
                    linestyle="--" if hollow else "-")
    ax.set_ylabel("median latency (ms), 95 % CI")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


def roofline(analysis, measured_points: list[dict], where: str = "") -> bytes:
    """The device's roofs, the ops at their roofline estimate (hollow) and measured points (filled;
    emulated ones hollow, orange-edged: not the board's speed).

    ``measured_points``: ``{"label", "intensity", "gops", "emulated"}`` (whole model, or per op from
    --per-layer); ``where``: the machine and location the points were measured on.
    """
    fig = _figure(9, 6)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ops = [o for o in analysis.ops if o.flops > 0 and o.bytes_fp32 > 0 and o.time_us > 0]
    xs_all = [o.intensity for o in ops] + [p["intensity"] for p in measured_points] or [1.0]
    lo = min(min(xs_all) / 4, 0.01)
    hi = max(max(xs_all) * 4, max((p.ridge_flops_per_byte for p in analysis.predictions), default=1) * 8)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for p in analysis.predictions:
        ax.plot(xs, [min(p.peak_gops, p.bandwidth_gbps * x) for x in xs],
                label=f"roof {p.unit.value} {p.precision.value}: {p.peak_gops:g} GOPS, {p.bandwidth_gbps:g} GB/s")
    if ops:
        ax.scatter([o.intensity for o in ops], [o.flops / (o.time_us * 1e3) for o in ops], facecolors="none",
                   edgecolors="tab:gray", label="ops at roofline estimate")
    colours: dict = {}
    for m in measured_points:
        c = colours.setdefault(m.get("run"), f"C{(len(colours) % 8) + 2}")
        style = {"facecolors": "none", "edgecolors": c, "linewidths": 1.5} if m.get("emulated") else {"color": c}
        ax.scatter([m["intensity"]], [m["gops"]], marker="*" if m.get("whole_model") else "o",
                   s=140 if m.get("whole_model") else 30, label=m.get("label"), **style)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, FP32 bytes)")
    ax.set_ylabel("GOPS")
    measured = f", measured on {where}" if where else ""
    ax.set_title(f"Roofline of {analysis.model.rsplit('/', 1)[-1]} on profile {analysis.profile}{measured}:\n"
                 "roofs and hollow grey points are estimates; filled points are measured (hollow stars: emulated)",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)
