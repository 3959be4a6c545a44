"""Printing results: one JSON object on stdout with ``--json``, readable tables otherwise."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

JsonOption = typer.Option(False, "--json", help="Print one JSON object on stdout and nothing else there.")

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False)
PIPE_WIDTH = 1000  # not a terminal (a pipe, a file, CI): tables at their full width, never cut at 80 columns
for _c in (stdout, stderr):
    if not _c.is_terminal:
        _c.width = PIPE_WIDTH


def _default(o: Any) -> Any:
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "value"):
        return o.value
    return str(o)


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=_default, indent=None, sort_keys=False)


_json_stream: list = [None]  # the real stdout while a --json command runs with library prints sent to stderr


def json_stream():
    """Where the one JSON object goes: the process's stdout, even while ``sys.stdout`` is redirected."""
    return _json_stream[0] or sys.stdout


def write_json_line(obj: Any) -> None:
    out = json_stream()
    out.write(dumps(obj) + "\n")
    out.flush()


def emit(json_mode: bool, payload: dict, human: Callable[[Console], None]) -> None:
    """Print ``payload`` as JSON (``--json``) or call ``human`` to draw it for a person."""
    if json_mode:
        write_json_line({"ok": True, **payload})
    else:
        human(stdout)


def warn(message: str) -> None:
    """A warning on stderr (never on stdout, which belongs to --json)."""
    stderr.print(f"[bold yellow]warning:[/] {message}")


def progress(json_mode: bool = False):
    """A rich progress display on stderr (quiet when stderr is not a terminal and --json is set)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=json_mode and not stderr.is_terminal,
    )


def progress_factory(json_mode: bool = False):
    """``factory(description, total)`` -> a context manager with ``.advance(n)``: the progress
    callback the API functions (convert, tune, …) take, drawn as a rich bar on stderr."""
    from contextlib import contextmanager

    @contextmanager
    def bar(description: str, total: int | None):
        with progress(json_mode) as p:
            task = p.add_task(description, total=total)

            class _Tick:
                @staticmethod
                def advance(n: int = 1) -> None:
                    p.advance(task, n)

                @staticmethod
                def describe(text: str) -> None:  # what the step is doing now (e.g. a search's candidate)
                    p.update(task, description=text)

            yield _Tick()

    return bar
