"""A roofline chart of an analysis (matplotlib, Agg backend), written atomically as PNG or SVG."""

from __future__ import annotations

import os
from pathlib import Path

from edgeopt.analyze.result import AnalysisResult
from edgeopt.errors import BadInputError, UsageError
from edgeopt.files import atomic_path

FORMATS = {".png": "png", ".svg": "svg"}


def check_plot_path(path: str | os.PathLike) -> str:
    """The format of ``path`` ('png' or 'svg'); a wrong suffix or a missing directory is an error."""
    out = Path(path)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise UsageError(f"--plot '{out}' must end in .png or .svg", "e.g. --plot roofline.png")
    if not out.parent.is_dir():
        raise BadInputError(f"--plot: directory '{out.parent}' does not exist", "create it first")
    return fmt


def plot_roofline(result: AnalysisResult, path: str | os.PathLike) -> Path:
    """Draw device roofs (one line per unit and precision) and ops (points sized by time); returns the path."""
    from edgeopt.deps import require

    out = Path(path)
    fmt = check_plot_path(out)
    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    ops = [o for o in result.ops if o.flops > 0 and o.bytes_fp32 > 0 and o.time_us > 0]
    intensities = [o.intensity for o in ops] or [1.0]
    lo = min(min(intensities) / 4, 0.01)
    hi = max(max(intensities) * 4, max((p.ridge_flops_per_byte for p in result.predictions), default=1) * 8)

    fig = Figure(figsize=(9, 6))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for p in result.predictions:
        ys = [min(p.peak_gops, p.bandwidth_gbps * x) for x in xs]
        ax.plot(xs, ys, label=f"{p.unit.value} {p.precision.value}: {p.peak_gops:g} GOPS, {p.bandwidth_gbps:g} GB/s")
    if ops:
        longest = max(o.time_us for o in ops)
        achieved = [o.flops / (o.time_us * 1e3) for o in ops]  # GOPS at the roofline time
        sizes = [6 + 300 * o.time_us / longest for o in ops]
        colours = ["tab:red" if o.bound.value == "memory" else "tab:blue" for o in ops]
        ax.scatter([o.intensity for o in ops], achieved, s=sizes, c=colours, alpha=0.5, edgecolors="none")
        for o in sorted(ops, key=lambda o: -o.time_us)[:5]:
            ax.annotate(o.name[:24], (o.intensity, o.flops / (o.time_us * 1e3)), fontsize=7, alpha=0.8)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("GOPS (roofline estimate)")
    ax.set_title(f"Roofline of {Path(result.model).name} on {result.profile} (estimate; ops at FP32 on "
                 f"{result.primary_unit.value}; red = memory-bound, size = time)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()

    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120)
    return out
