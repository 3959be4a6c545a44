"""``edgeopt report [RUN_ID...] -o report.html``: one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit


@app.command()
def report(
    run_ids: list[int] = typer.Argument(None, help="Runs to report (default: the latest 20)."),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="HTML file to write."),
    db: Path = typer.Option(None, "--db", help="Results store (default: $EDGEOPT_DATA_DIR/results.db)."),
    json_out: bool = JsonOption,
) -> None:
    """Latency distributions, roofline with measured points, optimisation waterfall and history, in one HTML file."""
    from edgeopt.report import build_report

    out = build_report(output, run_ids or None, str(db) if db else None)

    def human(c):
        c.print(f"wrote {out['output']} ({out['bytes'] / 1024:.0f} KiB, {len(out['runs'])} runs)")
        for line in out["banner"]:
            c.print(f"warning: {line}", style="yellow", markup=False)
        for n in out["notes"]:
            c.print(f"note: {n}")

    emit(json_out, out, human)
