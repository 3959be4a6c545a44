"""The chain options as command-line flags, generated from their one declaration.

Every field of :class:`edgeopt.options.ChainRequest` (a chain-level option, or one a stage config declares with
``user_option``, or the accuracy bound's) becomes ``--field-name`` with the declaration's description as its help:
adding an option to a stage config adds the flag to ``convert`` and ``tune``. Values are checked by the request
itself (one line naming the flag, with "did you mean" for enums). ``--metric`` is composed with its sub-flags
(``--ctc-blank``…); ``stages`` (a recipe's per-stage overrides) is reached with ``--set STAGE.FIELD=VALUE``, so
every field of every stage config is reachable from the command line too.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any

import typer

from edgeopt.cli.options import (
    CtcBlankOption,
    MetricAxisOption,
    MetricOption,
    MetricOutputOption,
    MetricThresholdOption,
    MinSqnrOption,
)
from edgeopt.errors import UsageError

METRIC_FLAGS = {"metric": MetricOption, "metric_axis": MetricAxisOption, "ctc_blank": CtcBlankOption,
                "metric_threshold": MetricThresholdOption, "min_sqnr_db": MinSqnrOption,
                "metric_output": MetricOutputOption}
SetOption = typer.Option(None, "--set", help="A stage config field: STAGE.FIELD=VALUE, e.g. qdq.calib_samples=64 "
                         "or qdq.bound.search_fraction=0.3 (as a recipe's stages:; repeatable).")


def _plain_type(annotation) -> type:
    """What the command line parses: bool and numbers as such; enums, literals and 'auto or a number' as text (the
    request checks them, naming the flag)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    if all(a is bool for a in args):
        return bool
    if len(args) == 1 and args[0] in (int, float):
        return args[0]
    return str


def flag(name: str, info) -> tuple[type, Any]:
    """(type, typer option) of the request field ``name`` (its declaration ``info``; the help names the
    declaration's default where the description does not)."""
    from edgeopt.options import stage_declared_options

    dashed = name.replace("_", "-")
    kind = _plain_type(info.annotation)
    decls = [f"--{dashed}/--no-{dashed}"] if kind is bool else [f"--{dashed}"]
    declared = stage_declared_options().get(name)
    default = declared.default if declared is not None else None
    help_text = info.description or ""
    if default not in (None, False, "") and "default" not in help_text:
        help_text += f" (default: {default:g})" if isinstance(default, float) else f" (default: {default})"
    return kind, typer.Option(None, *decls, help=help_text)


def chain_option(name: str, *, context: str = "") -> Any:
    """One chain flag, as ``convert`` has it, for a command that takes only a few (bench, remote-bench, optimize);
    ``context`` prefixes its help (``With a model: ``)."""
    from edgeopt.options import ChainRequest

    _, option = flag(name, ChainRequest.model_fields[name])
    option.help = context + (option.help or "")
    return option


def chain_flag_fields(exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The request fields that become flags: all but the composed metric, the recipe-only ``stages`` and ``exclude``."""
    from edgeopt.options import ChainRequest

    return {n: f for n, f in ChainRequest.model_fields.items() if n not in ("metric", "stages", *exclude)}


def parse_sets(values: list[str] | None) -> dict[str, dict[str, Any]]:
    """``--set STAGE.FIELD=VALUE`` (VALUE read as YAML: 64, true, [a, b]) as a recipe's ``stages:`` mapping;
    ``STAGE.SUB.FIELD`` nests (``qdq.bound.search_fraction``)."""
    import yaml

    stages: dict[str, dict[str, Any]] = {}
    for item in values or ():
        key, sep, raw = item.partition("=")
        path = key.strip().split(".")
        if not sep or len(path) < 2 or not all(path):
            raise UsageError(f"--set '{item}' is not STAGE.FIELD=VALUE", "e.g. --set qdq.calib_samples=64")
        node = stages.setdefault(path[0], {})
        for part in path[1:-1]:
            node = node.setdefault(part, {})
        try:
            node[path[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise UsageError(f"--set '{item}': the value is not valid YAML", "quote it, e.g. --set 'tvm.target=llvm'") from err
    return stages


def chain_flags(*, exclude: tuple[str, ...] = ()):
    """Decorator of a command: adds the generated chain flags, the metric flags and ``--set`` to its signature and
    calls it with them gathered as ``chain`` (a dict of request fields; None: not given)."""
    fields = chain_flag_fields(exclude)

    def decorate(command):
        sig = inspect.signature(command)
        own = [p for p in sig.parameters.values() if p.name != "chain"]
        added = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=opt, annotation=kind)
                 for n, (kind, opt) in ((n, flag(n, f)) for n, f in fields.items())]
        added += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=opt,
                                    annotation=str if n in ("metric", "metric_output") else (int if n in ("metric_axis", "ctc_blank")
                                                                          else float))
                  for n, opt in METRIC_FLAGS.items()]
        added.append(inspect.Parameter("set_", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=SetOption,
                                       annotation=list[str]))

        @functools.wraps(command)
        def wrapper(**kwargs):
            from edgeopt.cli.options import metric_spec

            chain = {n: kwargs.pop(n) for n in fields}
            chain["metric"] = metric_spec(*(kwargs.pop(n) for n in METRIC_FLAGS))
            chain["stages"] = parse_sets(kwargs.pop("set_")) or None
            return command(chain=chain, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=[*own, *added])
        return wrapper

    return decorate
