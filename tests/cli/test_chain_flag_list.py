"""The chain commands' flags, listed: a change to how the chain options are declared or generated must leave
``convert``'s and ``tune``'s command lines as they are (a flag added or renamed on purpose is added here too)."""

from __future__ import annotations

import typer.main

CHAIN = ["--backend", "--precision", "--quant-mode", "--prune", "--prune-mode", "--recover /--no-recover", "--threads",
         "--memory-budget", "--max-accuracy-drop", "--min-cosine", "--search-budget", "--search-fraction",
         "--confidence", "--min-speedup", "--calib-method", "--per-channel /--no-per-channel", "--recover-budget",
         "--early-exit", "--exit-confidence", "--exit-max-disagreement", "--max-fallback-ops",
         "--export-c /--no-export-c", "--c-name", "--metric", "--metric-axis", "--ctc-blank", "--metric-threshold",
         "--min-sqnr-db", "--metric-output", "--set"]
CONVERT = ["model", "--profile -p", "--output -o", "--calib", "--eval", "--preprocess", "--input-shape", "--recipe",
           "--force", "--dry-run", "--from-torch", "--weights", "--profile-dir", "--verify-on",
           "--fallback /--no-fallback", "--json", *CHAIN]
# tune builds TVM's plan: no --backend, no C array, no memory budget
TUNE = ["model", "--profile -p", "--trials", "--time-budget", "--tuning-db", "--rpc-tracker", "--rpc-key", "--calib",
        "--eval", "--preprocess", "--input-shape", "--recipe", "--dry-run", "--profile-dir", "--json",
        *[f for f in CHAIN if f not in ("--backend", "--memory-budget", "--export-c /--no-export-c", "--c-name")]]


def _flags(command: str) -> list[str]:
    from edgeopt.cli import app, commands  # noqa: F401 - the commands register themselves on import

    params = typer.main.get_command(app).commands[command].params
    return [" ".join(p.opts) + (" /" + " /".join(p.secondary_opts) if p.secondary_opts else "") for p in params]


def test_convert_and_tune_take_the_listed_flags_in_order():
    assert _flags("convert") == CONVERT
    assert _flags("tune") == TUNE


def test_every_chain_option_has_help():
    from edgeopt.cli import app, commands  # noqa: F401

    for param in typer.main.get_command(app).commands["convert"].params:
        if param.opts[0] in " ".join(CHAIN).split():
            assert param.help, param.opts
