"""The chain options as the user asks for them, generated from their declarations, and the typed options of
``convert``.

:class:`ChainRequest` is what a user may ask of the converter chain (backend, precision, pruning,
recovery, calibration, gates, search budget, threads, task metric, per-stage overrides); every
field is optional: None takes the recipe's value, then the profile's default. Its fields are generated
from the one declaration of each option: the chain-level ones in :class:`edgeopt.converters.base.ChainOptions`
(``chain_option``), a stage's own in its config (``user_option``), the bound's in ``AccuracyBound``. The recipe
file (:class:`edgeopt.plan.Recipe`), the pipeline's target (:class:`edgeopt.pipeline.recipe.Target`) and
:class:`ConvertOptions` derive from it, and the CLI's convert flags fill it; ``make_plan`` resolves it against
the profile into ``ChainOptions`` (the values the stages configure themselves from, hashed into the plan).

The keyword forms of the API (``convert(..., precision="int8")``, ``make_plan(..., prune=0.3)``)
build these objects with :func:`from_keywords`: an unknown keyword is a usage error with "did you
mean", a bad value one line naming the flag.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator
from pydantic.fields import FieldInfo

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import ChainOptions, is_chain_option
from edgeopt.errors import UsageError, did_you_mean


def _chain_level_requested() -> dict[str, tuple[Any, FieldInfo]]:
    """The chain-level options (declared in :class:`ChainOptions`, with ``chain_option``) as request fields: the
    type the user asks in, the declaration's checks and description, None when not given ({} for ``stages``)."""
    out = {}
    for name, info in ChainOptions.model_fields.items():
        if is_chain_option(info):
            annotation = ChainOptions.asked_as.get(name, info.annotation)
            out[name] = _as_requested(info, annotation, {} if isinstance(info.default, dict) else None)
    return out


def _as_requested(field: FieldInfo, annotation: Any = None, default: Any = None) -> tuple[Any, FieldInfo]:
    """A declaration as a request field: the same type (or ``annotation``), checks and description, ``default``
    (None: not given)."""
    annotation = field.annotation if annotation is None else annotation
    return (annotation if default is not None else annotation | None), FieldInfo.merge_field_infos(field, default=default)


# The chain-level options, generated from their declaration (converters/base.py ChainOptions)
_ChainLevelRequest = create_model("_ChainLevelRequest", __config__=ConfigDict(extra="forbid", frozen=True),
                                  __module__=__name__, **_chain_level_requested())


class _ChainRequestBase(_ChainLevelRequest):
    """What the user asks of the chain; None: the recipe's value, else the profile's default."""

    memory_budget: int | str | None = Field(
        default=None, description="Memory the model may take on the device (weights + arena + runtime), e.g. 300MB "
        "or 512KB (default: the profile's budget_mb, else its RAM). Over it, convert tries INT8 weights, then "
        "static INT8, and refuses (exit 5) when neither fits.")

    @field_validator("memory_budget", mode="before")
    @classmethod
    def _bytes(cls, v):
        return parse_bytes(v)

    @field_validator("prune", mode="before")
    @classmethod
    def _prune_auto_or_number(cls, v):
        return prune_field(v)

    def accuracy_bound(self) -> AccuracyBound:
        """The bound every searching stage gets: the fields given here over :class:`AccuracyBound`'s defaults."""
        given = {k: getattr(self, k) for k in AccuracyBound.model_fields if getattr(self, k) is not None}
        return AccuracyBound.model_validate(given)

    def stage_options(self) -> dict[str, Any]:
        """The options a stage config declares (:func:`stage_declared_options`, not the bound's) given here, by name:
        what ``ChainOptions.given`` carries to every stage's ``configure``."""
        return {k: getattr(self, k) for k in stage_declared_options()
                if k not in AccuracyBound.model_fields and getattr(self, k) is not None}

    def chain_request(self) -> ChainRequest:
        """Only the chain options of a model that derives from this one (a recipe, a target, convert's options)."""
        return ChainRequest.model_validate({k: getattr(self, k) for k in ChainRequest.model_fields})

    def over(self, base: ChainRequest | None) -> _ChainRequestBase:
        """These options over ``base``'s: a value given here wins, per-stage overrides merge key by key (no base:
        these options as they are, a convert's options included: the planner reads only the request's fields)."""
        if base is None:
            return self
        merged = {k: getattr(self, k) if getattr(self, k) is not None else getattr(base, k)
                  for k in ChainRequest.model_fields if k != "stages"}
        stages = {name: {**base.stages.get(name, {}), **self.stages.get(name, {})}
                  for name in dict.fromkeys([*base.stages, *self.stages])}
        return ChainRequest.model_validate({**merged, "stages": stages})


def stage_declared_options() -> dict[str, FieldInfo]:
    """Every user option a stage config declares (``user_option``), by option name: the accuracy bound's fields and
    the stages' own (``per_channel``, ``recover_budget``, ``export_c``…)."""
    from edgeopt.converters.base import option_name
    from edgeopt.converters.early_exit.stage import EarlyExitConfig
    from edgeopt.converters.quantize import QdqConfig
    from edgeopt.converters.recover import RecoverConfig
    from edgeopt.converters.registry import backend_classes

    out = dict(AccuracyBound.model_fields)
    backends = [cls.Config for cls in backend_classes().values()]
    for config in (QdqConfig, RecoverConfig, EarlyExitConfig, *backends):  # tests/chain/test_option_declarations.py checks the list
        for field_name, info in config.model_fields.items():
            if (info.json_schema_extra or {}).get("declares"):
                out[option_name(field_name, info)] = info
    return out


# Each stage option is declared once, in its stage config; the request is generated from those declarations.
ChainRequest = create_model("ChainRequest", __base__=_ChainRequestBase, __module__=__name__,
                            **{name: _as_requested(f) for name, f in stage_declared_options().items()})


_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}


def parse_bytes(v):
    """``300MB``, ``512KB``, ``1.5GB``, ``64MiB`` or a number of bytes, as bytes (KB/MB/GB: powers of 1000)."""
    if v is None or isinstance(v, int):
        return v
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]i?B|B)?\s*", str(v), re.I)
    if not m:
        raise ValueError("give a size such as 300MB, 512KB or 1.5GB")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").upper()])


def prune_field(v):
    """``prune``: 'auto' (any case) or a number; anything else one clear message."""
    if isinstance(v, str):
        if v.strip().lower() == "auto":
            return "auto"
        try:
            return float(v)
        except ValueError:
            raise ValueError("give a fraction in [0, 1) or 'auto'") from None
    return v


class ConvertOptions(ChainRequest):
    """Everything ``convert`` takes besides the model, the profile, the output and its callbacks."""

    recipe: Path | ChainRequest | None = None  # a recipe YAML (or a Recipe); these options override it
    calib: Path | None = None  # .npz named after the inputs, or an image folder
    eval: Path | None = None  # .npz with 'labels', or class sub-folders
    input_shapes: dict[str, tuple[int, ...]] = {}  # fixed by the normalize stage; also ["x=1x3x224x224", ...]
    preprocess: str | dict[str, Any] | None = None  # as --preprocess: KEY=VALUE list, a mapping, or a YAML file
    from_torch: str | None = None  # package.module:factory building a torch.nn.Module
    weights: Path | None = None  # state dict for from_torch
    profile_dirs: list[Path] = []  # more directories to find the profile in
    metric_search_path: list[Path] = []  # where a --metric MODULE:FUNCTION is imported from
    force: bool = False  # replace an existing output
    dry_run: bool = False  # make the plan and stop
    verify_on: str | None = None  # a device (inventory name): run the artifact there, compare with this host
    fallback: bool = True  # ARM profiles: the next backend, then the best float precision that holds, when one misses

    def metric_dirs(self) -> tuple[str, ...]:
        """Where a user's ``--metric MODULE:FUNCTION`` is imported from: the given dirs, then the recipe file's
        directory (then the current directory, ``edgeopt.metrics``' last resort)."""
        recipe_dir = (str(Path(self.recipe).resolve().parent),) if isinstance(self.recipe, (str, Path)) else ()
        return (*map(str, self.metric_search_path), *recipe_dir)

    @field_validator("input_shapes", mode="before")
    @classmethod
    def _shapes(cls, v):
        if v is None:
            return {}
        if isinstance(v, dict):
            return v
        from edgeopt.model import parse_input_shapes

        return parse_input_shapes([v] if isinstance(v, str) else list(v))  # a bad one is exit 2, one line

    @field_validator("profile_dirs", "metric_search_path", mode="before")
    @classmethod
    def _paths(cls, v):
        return [] if v is None else [v] if isinstance(v, (str, Path)) else list(v)


M = TypeVar("M", bound=BaseModel)


def from_keywords(cls: type[M], values: dict[str, Any], *, where: str = "") -> M:
    """``cls`` from keyword arguments: an unknown keyword or a bad value is one usage-error line (exit 2);
    a keyword given as None is left at its default."""
    known = list(cls.model_fields)
    for key in values:
        if key not in cls.model_fields:
            raise UsageError(f"{where or cls.__name__}: unknown option '{key}'",
                             did_you_mean(key, known) or f"known options: {', '.join(known)}")
    values = {k: v for k, v in values.items() if v is not None}  # None: not given (the default), as before
    if isinstance(values.get("metric"), str):  # a name or MODULE:FUNCTION; a bad one is exit 2 naming --metric
        from edgeopt.metrics import as_metric_spec

        values = {**values, "metric": as_metric_spec(values["metric"])}
    try:
        return cls.model_validate(values)
    except ValidationError as err:
        raise option_error(err) from err


def option_error(err: ValidationError) -> UsageError:
    """One line naming the flag (``--prune-mode``) of the first bad option value."""
    first = err.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "options"
    flag = "--" + field.replace("_", "-")
    value = first.get("input")
    if first["type"] == "enum":
        names = re.findall(r"'([^']*)'", str((first.get("ctx") or {}).get("expected", "")))
        return UsageError(f"{flag} '{value}' is not one of {', '.join(names)}",
                          did_you_mean(str(value), names) or f"use one of: {', '.join(names)}")
    if field == "prune" and first["type"] in ("less_than", "greater_than_equal"):
        return UsageError(f"{flag} {value} is out of range", "give a fraction in [0, 1), e.g. --prune 0.3")
    msg = str(first["msg"]).removeprefix("Value error, ")
    return UsageError(f"{flag} {value!r}: {msg}", "fix the value")
