"""The plan of a conversion: which stages run, in order, each with its typed config.

``make_plan`` starts from the device profile (its backends in order of preference and its
``default_chain``), then applies a recipe file, then the command line flags. Each stage's config
comes from ``StageClass.configure(options)`` and then the recipe's ``stages: {name: {...}}``
overrides (unknown keys are errors with "did you mean"). A plan hashes to the sha256 of its
canonical JSON (the cache key of a conversion). The request is resolved over the profile in
:mod:`edgeopt.option_resolution`, the backend chosen and checked in :mod:`edgeopt.backend_choice`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SerializeAsAny, ValidationError

from edgeopt.backend_choice import backend_class
from edgeopt.config_errors import validation_message
from edgeopt.converters.base import ChainOptions, PruneMode, StageConfig
from edgeopt.enums import BackendName, Precision
from edgeopt.errors import BadInputError, UsageError
from edgeopt.files import read_text_file
from edgeopt.option_resolution import resolve_options
from edgeopt.options import ChainRequest


class StageSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    config: SerializeAsAny[StageConfig]

    def to_json(self) -> dict:
        return {"name": self.name, "config": self.config.model_dump(mode="json")}


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    profile: str
    backend: BackendName
    precision: Precision
    options: ChainOptions
    stages: tuple[StageSpec, ...]
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "profile": self.profile,
            "backend": self.backend.value,
            "precision": self.precision.value,
            "stages": [s.to_json() for s in self.stages],
            "plan_hash": self.hash,
        }

    @property
    def hash(self) -> str:
        body = {
            "profile": self.profile,
            "backend": self.backend.value,
            "precision": self.precision.value,
            "options": self.options.model_dump(mode="json"),
            "stages": [s.to_json() for s in self.stages],
        }
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def __hash__(self) -> int:
        return hash(self.hash)

    def __str__(self) -> str:
        lines = [f"plan {self.hash[:12]}: {self.backend.value} {self.precision.value} for profile {self.profile}"]
        for i, s in enumerate(self.stages, 1):
            cfg = ", ".join(f"{k}={v}" for k, v in s.config.model_dump(mode="json").items())
            lines.append(f"  {i}. {s.name}({cfg})")
        return "\n".join(lines)


class Recipe(ChainRequest):
    """A recipe file (YAML): the chain options (:class:`edgeopt.options.ChainRequest`) overriding the
    profile's defaults; CLI flags override it in turn."""


def load_recipe(path: str | Path) -> Recipe:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"recipe file '{p}' not found", "check the path")
    try:
        data = yaml.safe_load(read_text_file(p, "recipe file")) or {}
    except yaml.YAMLError as err:
        raise BadInputError(f"{p}: not valid YAML", "fix the YAML syntax") from err
    if not isinstance(data, dict):
        raise BadInputError(f"{p}: a recipe must be a YAML mapping", "e.g. 'precision: int8'")
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise validation_message(err, str(p), list(Recipe.model_fields)) from err


def _stage_class(name: str):
    from edgeopt.converters.registry import get_stage

    try:
        return get_stage(name)
    except ModuleNotFoundError as err:
        raise UsageError(f"stage '{name}' is not available in this edgeopt build", f"plan without it ({err.name} missing)") from err


def _deep_merge(base: dict, override: dict) -> dict:
    """``override`` over ``base``, key by key into nested mappings (``bound: {search_fraction: 0.3}`` keeps the
    bound's other fields)."""
    out = dict(base)
    for key, value in override.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _configure(name: str, cls, options: ChainOptions) -> StageConfig | None:
    config = cls.configure(options)
    override = options.stages.get(name)
    if config is not None and override:
        try:
            config = type(config).model_validate(_deep_merge(config.model_dump(), override))
        except ValidationError as err:
            raise validation_message(err, f"recipe stages.{name}", type(config)) from err
    settle = getattr(cls, "settle_config", None)  # after the overrides: what they name (TVM: its database's hash)
    return settle(config) if config is not None and settle is not None else config


def make_plan(profile, request: ChainRequest | None = None, *, recipe: ChainRequest | str | Path | None = None,
              input_shapes: dict[str, tuple[int, ...]] | None = None, **options) -> Plan:
    """The ordered stages for ``profile`` with the user's overrides: ``recipe`` (a file or a
    :class:`Recipe`), then ``request`` or the same chain options as keywords (``precision="int8"``;
    an unknown keyword is exit 2 with "did you mean")."""
    r = _request(request, recipe, options)
    warnings: list[str] = []
    resolved = resolve_options(profile, r, input_shapes, warnings)
    bcls = backend_class(resolved.backend)
    specs = []
    for name in _stages_wanted(resolved, bcls, warnings):
        config = _configure(name, _stage_class(name), resolved)
        if config is not None:
            specs.append(StageSpec(name=name, config=config))
    specs.append(StageSpec(name=resolved.backend.value, config=_configure(resolved.backend.value, bcls, resolved)))
    specs = _with_planned_auto_recovery(specs)
    _check_unplanned_overrides(resolved, {s.name for s in specs}, warnings)
    return Plan(profile=profile.name, backend=resolved.backend, precision=resolved.precision, options=resolved,
                stages=tuple(specs), warnings=tuple(warnings))


def _request(request: ChainRequest | None, recipe, keywords: dict) -> ChainRequest:
    """The request (or its keywords) over the recipe (a file or a :class:`Recipe`)."""
    from edgeopt.options import from_keywords

    if request is not None and keywords:
        raise UsageError(f"make_plan: give the chain options as a ChainRequest or as keywords, not both "
                         f"({', '.join(keywords)})")
    if request is None:
        request = from_keywords(ChainRequest, keywords, where="make_plan")
    if recipe is not None and not isinstance(recipe, ChainRequest):
        recipe = load_recipe(recipe)
    return request.over(recipe)


def _check_unplanned_overrides(options: ChainOptions, planned: set[str], warnings: list[str]) -> None:
    """Overrides of a stage this plan does not run are still checked (an unknown key is an error, never dropped)
    and named in a warning: they do nothing here."""
    for name, override in options.stages.items():
        if name in planned or not override:
            continue
        config_cls = _stage_class(name).Config
        try:
            config_cls.model_validate(_deep_merge(config_cls().model_dump(), override))
        except ValidationError as err:
            raise validation_message(err, f"recipe stages.{name}", config_cls) from err
        warnings.append(f"stages.{name} ({', '.join(override)}) does nothing: this plan runs no {name} stage")


def _with_planned_auto_recovery(specs: list[StageSpec]) -> list[StageSpec]:
    """``--prune auto`` distils each candidate with the recover stage's planned config (its recipe overrides
    included): it goes into the prune stage's config (``auto_recover_config``), so ``--dry-run`` shows it and the
    plan hash covers it. The recover stage itself then passes the chosen (already recovered) student through."""
    by_name = {s.name: s for s in specs}
    prune, recover = by_name.get("prune"), by_name.get("recover")
    if prune is None or recover is None or not getattr(prune.config, "auto", False):
        return specs
    config = prune.config.model_copy(update={"auto_recover_config": recover.config})
    return [StageSpec(name="prune", config=config) if s is prune else s for s in specs]


def _stages_wanted(options: ChainOptions, bcls, warnings: list[str]) -> list[str]:
    """The stages before the backend that this plan runs, in order (warning about a flag that does nothing)."""
    wanted = ["normalize"]
    pruning = options.prune > 0 or options.prune_auto
    if pruning or options.prune_mode == PruneMode.SPARSE_2_4:
        wanted.append("prune")
    if options.prune_mode == PruneMode.SPARSE_2_4:
        from edgeopt.converters.prune_config import SPARSE_2_4_WARNING

        warnings.append(SPARSE_2_4_WARNING)
    if pruning and options.prune_mode == PruneMode.CHANNELS and options.recover is not False:
        from edgeopt.converters.recover import train_extra_missing

        if options.recover is None and (missing := train_extra_missing()):
            warnings.append(f"pruning without recovery: {missing} is not installed (pip install 'edgeopt[train]' "
                            "distils the pruned model from FP32; --no-recover silences this)")
        else:
            wanted.append("recover")
    elif options.recover:
        warnings.append("--recover does nothing here: it distils a channel-pruned model (give --prune R, mode channels)")
    if options.precision in (Precision.INT8, Precision.FP16) and not bcls.quantizes_itself:
        wanted.append("qdq")
    wanted.append("early_exit")  # its configure says whether it runs (--early-exit)
    return wanted
