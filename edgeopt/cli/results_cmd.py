"""``edgeopt results list|show|compare|export``: the results store and its regression gate."""

from __future__ import annotations

from pathlib import Path

import typer

from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit
from edgeopt.errors import GateFailedError

results_app = typer.Typer(help="Stored benchmark runs: list, show, compare (regression gate), export.",
                          no_args_is_help=True)
app.add_typer(results_app, name="results")

DbOption = typer.Option(None, "--db", help="Results store (default: $EDGEOPT_DATA_DIR/results.db).")


def _db(db: Path | None) -> str | None:
    return str(db) if db else None


@results_app.command("list")
def list_(json_out: bool = JsonOption, db: Path = DbOption,
          model: str = typer.Option(None, "--model", help="Only runs of this model (file name)."),
          device: str = typer.Option(None, "--device", help="Only runs measured on this machine (host or device name).")) -> None:
    """List stored runs."""
    from rich.table import Table

    from edgeopt.results import list_runs

    rows = list_runs(_db(db), model=model, device=device)

    def human(c):
        t = Table("id", "created", "model", "backend", "precision", "measured on", "location", "CPU", "built for",
                  "stage", "p50 ms")
        for r in rows:
            where = r["location"] or "-"
            if r.get("emulated_on"):
                where = f"emulated on {r['emulated_on']}"
            t.add_row(str(r["id"]), r["created"][:19], r["model"] or "-", r["backend"] or "-", r["precision"] or "-",
                      r["device"] or "-", where, r.get("cpu_model") or "-", r.get("built_for") or "-",
                      r["stage"] or "-", f"{r['p50_ms']:.3f}" if r["p50_ms"] is not None else "-")
        c.print(t)

    emit(json_out, {"runs": rows}, human)


@results_app.command("show")
def show(run_id: int, json_out: bool = JsonOption, db: Path = DbOption) -> None:
    """Show one run in full."""
    from edgeopt.identity import describe, identity_of
    from edgeopt.results import get_run

    run = get_run(run_id, _db(db))
    run["identity"] = identity_of(run["result"])

    def human(c):
        res = run["result"]
        lat = res.get("latency_ms") or {}
        c.print(f"run {run['id']} ({run['created']}): {run['model']} {run['backend']} {run['precision']}; measured on "
                f"{describe(run['identity'])}", markup=False)
        c.print(f"p50 {lat.get('p50', 0):.4f} ms  [95% CI {lat.get('ci95_low', 0):.4f}-{lat.get('ci95_high', 0):.4f}]  "
                f"p90 {lat.get('p90', 0):.4f}  p99 {lat.get('p99', 0):.4f}  runs {res.get('runs')}  "
                f"stop: {res.get('stop_rule')}")
        env = res.get("environment") or {}
        c.print(f"environment: {env.get('hostname')} {(env.get('cpu') or {}).get('model')} load "
                f"{env.get('load_before')} -> {env.get('load_after')}; libraries {env.get('libraries')}")
        if res.get("labels"):
            c.print(f"labels: {res['labels']}")

    emit(json_out, {"run": run}, human)


@results_app.command("compare")
def compare(a: int, b: int, json_out: bool = JsonOption, db: Path = DbOption,
            threshold: float = typer.Option(0.05, "--threshold", min=0, help="Relative median change that counts."),
            alpha: float = typer.Option(0.01, "--alpha", min=0, max=1, help="Significance level (Mann-Whitney U)."),
            fail_on_regression: bool = typer.Option(False, "--fail-on-regression", help="Exit 5 on a regression."),
            allow_cross_device: bool = typer.Option(False, "--allow-cross-device",
                                                    help="Compare runs measured on different machines or location "
                                                         "kinds (refused otherwise, exit 3); the output says so.")) -> None:
    """Compare run B against run A: regression / improvement / no change (runs of one device only)."""
    from edgeopt.results import compare_runs

    out = compare_runs(a, b, _db(db), threshold=threshold, alpha=alpha, allow_cross_device=allow_cross_device)

    def human(c):
        colour = {"regression": "red", "improvement": "green"}.get(out["verdict"], "white")
        c.print(f"[bold {colour}]{out['verdict']}[/]: median {out['median_a_ms']:.4f} ms (run {a}, n={out['n_a']}) -> "
                f"{out['median_b_ms']:.4f} ms (run {b}, n={out['n_b']}), {out['relative_change']:+.1%}; "
                f"Mann-Whitney p = {out['p_value']:.3g} (alpha {out['alpha']}, threshold {out['threshold']:.0%})")
        if out.get("note"):
            c.print(out["note"])
        for w in out.get("warnings", []):
            c.print(f"warning: {w}", style="yellow", markup=False)

    gate = fail_on_regression and out["verdict"] == "regression"
    if not (gate and json_out):  # with --json a failed gate prints one error object (with the figures)
        emit(json_out, {"comparison": out}, human)
    if gate:
        cross = " (cross-device: see warnings)" if out["cross_device"] else ""
        raise GateFailedError(f"regression: run {b} is {out['relative_change']:+.1%} slower than run {a} "
                              f"(p = {out['p_value']:.3g}){cross}", details={"comparison": out,
                                                                         "warnings": out["warnings"]})


@results_app.command("export")
def export(output: Path = typer.Option(..., "-o", "--output", help="File to write."),
           fmt: str = typer.Option("json", "--format", help="json (full results) or csv (summary columns)."),
           json_out: bool = JsonOption, db: Path = DbOption) -> None:
    """Export every run to JSON or CSV (written atomically)."""
    from edgeopt.results import export_runs

    out = export_runs(output, fmt, _db(db))
    emit(json_out, out, lambda c: c.print(f"wrote {out['runs']} runs to {out['output']} ({out['format']})"))
