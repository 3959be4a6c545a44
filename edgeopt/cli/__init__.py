"""The ``edgeopt`` command line: a thin layer over :mod:`edgeopt.api`.

Each verb lives in its own module and only turns arguments into API calls and
results into text or JSON. Errors become one line on stderr and an exit code
(see :class:`edgeopt.errors.ExitCode`); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import os
import sys
import traceback

import typer

from edgeopt import __version__
from edgeopt.errors import EdgeoptError, ExitCode
from edgeopt.outputs import environment_fault  # the CLI maps environment faults with it (also re-exported)

app = typer.Typer(
    name="edgeopt",
    help="Make a model fast on a named edge device, and prove it on that device.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgeopt {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors (and library messages)."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the libraries' own log lines (ONNX Runtime, "
                                 "OpenVINO/NNCF, TensorFlow) on stderr; hidden otherwise."),
) -> None:
    if debug:
        os.environ["EDGEOPT_DEBUG"] = "1"


def _register() -> None:
    # Each module adds its command(s) to ``app``; heavy imports stay inside the commands.
    from edgeopt.cli import commands  # noqa: F401


def _print_error(err_json: dict, line: str, json_mode: bool) -> None:
    if json_mode:
        from edgeopt.cli.output import write_json_line

        write_json_line({"ok": False, "error": err_json})
    sys.stderr.write(f"edgeopt: error: {line}\n")


def _from_ctrl_c(err: BaseException) -> bool:
    seen = 0
    e: BaseException | None = err
    while e is not None and seen < 10:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _print_interrupted(json_mode: bool) -> None:
    """Ctrl-C: --json still prints its one object; outputs are atomic, so nothing is half-written."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the line being printed
    _print_error({"kind": "interrupted", "exit_code": int(ExitCode.INTERRUPTED),
                  "message": "interrupted (Ctrl-C): no output was left half-written"}, "interrupted", json_mode)


def _interrupted_exit(from_command_line: bool) -> int:
    """Exit 130 after a handled Ctrl-C. From the command line the process ends here: CPython remembers a
    KeyboardInterrupt that passed through a library's nested interpreter call and would then end the process by
    SIGINT (exit -2) even though edgeopt handled it and printed its one line; outputs are already atomic and the
    temporary ones removed, so nothing is left to clean up."""
    if from_command_line:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        os._exit(int(ExitCode.INTERRUPTED))
    return int(ExitCode.INTERRUPTED)


def library_loggers() -> list[str]:
    """The Python loggers of every backend's libraries (each backend's hooks name them)."""
    from edgeopt.converters.registry import backend_hooks

    return [name for hooks in backend_hooks().values() for name in hooks.loggers]


def quiet_libraries() -> None:
    """Keep the libraries' own chatter off stderr, where edgeopt's one error line goes: native log lines
    (ONNX Runtime's coloured warnings, TensorFlow's and OpenVINO's C++ logs) write to file descriptor 2,
    which now leads to /dev/null while ``sys.stderr`` (edgeopt's messages) keeps the real stderr; their
    Python loggers and warnings are raised to ERROR. ``--verbose`` (or ``--debug``) skips all this."""
    import logging
    import warnings

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TORCH_LOGS", "-all")  # torch's own handlers (e.g. "No CUDA runtime is found") at ERROR
    try:
        sys.stderr.flush()
        real = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        sys.stderr = os.fdopen(real, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                               errors="backslashreplace")
    except (OSError, ValueError, AttributeError):
        pass  # no real descriptor 2 (embedded): leave stderr as it is
    from edgeopt.deps import quiet_library_output

    quiet_library_output()
    logging.getLogger().setLevel(logging.ERROR)
    for name in library_loggers():
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    try:  # NNCF's progress bars draw on rich's global console; edgeopt's own consoles are separate
        import rich

        rich.reconfigure(file=open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    json_mode = "--json" in argv
    debug = "--debug" in argv or os.environ.get("EDGEOPT_DEBUG") == "1"
    if from_command_line and not debug and "--verbose" not in argv and os.environ.get("EDGEOPT_VERBOSE") != "1":
        quiet_libraries()
    _register()
    try:
        # standalone mode: the CLI library reports usage errors itself (exit 2) and handles --help.
        if json_mode:  # stdout is the one JSON object: whatever a library prints goes to stderr meanwhile
            import contextlib

            from edgeopt.cli import output

            output._json_stream[0] = sys.stdout
            with contextlib.redirect_stdout(sys.stderr):
                app(args=argv, prog_name="edgeopt", standalone_mode=True)
        else:
            app(args=argv, prog_name="edgeopt", standalone_mode=True)
        return 0
    except SystemExit as e:
        code = e.code
        code = code if isinstance(code, int) else (0 if code is None else 1)
        if code == ExitCode.INTERRUPTED and _from_ctrl_c(e):  # the CLI library turned Ctrl-C into exit 130
            _print_interrupted(json_mode)
            return _interrupted_exit(from_command_line)
        if code == ExitCode.USAGE and json_mode:  # the usage message itself is already on stderr
            from edgeopt.cli.output import write_json_line

            write_json_line({"ok": False, "error": {"kind": "usage", "exit_code": 2,
                                                    "message": "usage error (see stderr)"}})
        return code
    except EdgeoptError as e:
        if debug:
            traceback.print_exc()
        _print_error(e.to_json(), e.one_line(), json_mode)
        return int(e.exit_code)
    except KeyboardInterrupt:
        _print_interrupted(json_mode)
        return _interrupted_exit(from_command_line)
    except Exception as e:  # noqa: BLE001 - the one place unexpected errors are caught
        env = environment_fault(e)
        if env is not None:  # the user's disk or files, not a bug in edgeopt
            if debug:
                traceback.print_exc()
            _print_error(env.to_json(), env.one_line(), json_mode)
            return int(env.exit_code)
        if debug:
            traceback.print_exc()
        msg = f"internal error: {type(e).__name__}: {e}"
        hint = " (rerun with --debug for the traceback, and please report it)"
        _print_error({"kind": "internal", "exit_code": 1, "message": msg}, msg + hint, json_mode)
        return ExitCode.INTERNAL
