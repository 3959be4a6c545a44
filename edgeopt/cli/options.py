"""Options that several verbs share (declared once, so their names, checks and help agree)."""

from __future__ import annotations

import typer

from edgeopt.errors import UsageError

ProfileOption = typer.Option("host", "--profile", "-p", help="Device profile name or YAML file.")
ProfileDirOption = typer.Option(None, "--profile-dir", help="Extra directory of profile YAML files.")
InputShapeOption = typer.Option(None, "--input-shape",
                                help="Fix an input's shape: NAME=DIMS, e.g. input=1x3x224x224 (repeatable).")


def _streams(value: str | None) -> int | str | None:
    from edgeopt.runtime.throughput import parse_streams

    try:
        return parse_streams(value)
    except ValueError as err:
        raise UsageError(f"--streams '{value}' is not a count or 'auto'", "e.g. --streams 4 or --streams auto") from err


StreamsOption = typer.Option(None, "--streams", callback=_streams,
                             help="Also measure N requests in flight at once; 'auto': the backend's choice.")
BatchOption = typer.Option(None, "--batch", min=1, help="Also measure one stream at this batch (symbolic batch dims).")
SearchBudgetOption = typer.Option(None, "--search-budget", min=1,
                                  help="Seconds for the accuracy-aware INT8 search (--max-accuracy-drop; default 120).")
MinSpeedupOption = typer.Option(None, "--min-speedup", min=0.01,
                                help="Gate: accuracy-aware INT8 must be this many times faster than FP32 (quick estimate).")
