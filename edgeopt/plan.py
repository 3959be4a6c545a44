"""The plan of a conversion: which stages run, in order, each with its typed config.

``make_plan`` starts from the device profile (its backends in order of preference and its
``default_chain``), then applies a recipe file, then the command line flags. Each stage's config
comes from ``StageClass.configure(options)`` and then the recipe's ``stages: {name: {...}}``
overrides (unknown keys are errors with "did you mean"). A plan hashes to the sha256 of its
canonical JSON (the cache key of a conversion).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SerializeAsAny, ValidationError

from edgeopt.converters.base import ChainOptions, PruneMode, StageConfig
from edgeopt.enums import BackendName, Precision, QuantMode, UnitKind
from edgeopt.errors import BadInputError, MissingDependencyError, UsageError, did_you_mean
from edgeopt.files import read_text_file
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


def _nested_fields(model: type[BaseModel], path) -> list[str]:
    """The field names of the sub-config at ``path`` inside ``model`` (``bound`` -> AccuracyBound's)."""
    for part in path:
        info = model.model_fields.get(str(part))
        subs = [a for a in (info.annotation, *getattr(info.annotation, "__args__", ())) if info is not None
                and isinstance(a, type) and issubclass(a, BaseModel)]
        if not subs:
            return []
        model = subs[0]
    return list(model.model_fields)


def _validation_message(err: ValidationError, origin: str, fields: list[str] | type[BaseModel]) -> BadInputError:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    if not isinstance(fields, list):
        fields = _nested_fields(fields, first["loc"][:-1])
    if first["type"] == "extra_forbidden":
        key = str(first["loc"][-1])
        return BadInputError(f"{origin}: unknown key '{loc}'", did_you_mean(key, fields) or f"known keys: {', '.join(fields)}")
    return BadInputError(f"{origin}: '{loc}': {first['msg']}", "fix the value")


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
        raise _validation_message(err, str(p), list(Recipe.model_fields)) from err


# --------------------------------------------------------------------------- backends


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def backend_class(name: BackendName):
    """The Backend class for ``name``; exit 4 (naming the extra) when its libraries are missing. Backend
    modules import nothing heavy, so the class's ``requires`` is checked (find_spec) before any library is."""
    from edgeopt.converters.registry import BACKEND_MODULES, get_backend

    try:
        cls = get_backend(name)
    except ModuleNotFoundError as e:
        if e.name and BACKEND_MODULES[name].startswith(e.name):
            raise UsageError(f"backend '{name.value}' is not available in this edgeopt build", "use --backend onnxruntime") from e
        raise MissingDependencyError(f"backend '{name.value}' needs {e.name}, which is not installed",
                                     f"install it with: pip install 'edgeopt[{name.value}]'") from e
    absent = [m for m in cls.requires if not _importable(m)]
    if absent:
        how = f"pip install 'edgeopt[{cls.extra}]'" if cls.extra else f"pip install {absent[0]}"
        raise MissingDependencyError(
            f"backend '{name.value}' needs {', '.join(absent)}, which is not installed",
            f"install it with: {how}" + (f" (the '{cls.extra}' extra)" if cls.extra else ""),
        )
    return cls


def choose_backend(profile, requested: str | None, warnings: list[str]) -> BackendName:
    if requested:
        from edgeopt.converters.registry import parse_backend

        name = parse_backend(requested)
        if profile.backend(name) is None:
            listed = ", ".join(b.name.value for b in profile.backends)
            warnings.append(f"profile '{profile.name}' does not list backend '{name.value}' (it lists {listed}); using it anyway")
        backend_class(name)
        return name
    first_error = None
    for target in profile.backends:
        try:
            backend_class(target.name)
            return target.name
        except (MissingDependencyError, UsageError) as err:
            first_error = first_error or err
    assert first_error is not None
    raise MissingDependencyError(f"none of profile '{profile.name}''s backends is installed: {first_error.message}", first_error.hint)


# --------------------------------------------------------------------------- stages


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
    override = options.stage_overrides.get(name)
    if config is not None and override:
        try:
            config = type(config).model_validate(_deep_merge(config.model_dump(), override))
        except ValidationError as err:
            raise _validation_message(err, f"recipe stages.{name}", type(config)) from err
    settle = getattr(cls, "settle_config", None)  # after the overrides: what they name (TVM: its database's hash)
    return settle(config) if config is not None and settle is not None else config


def _quant_preset(profile, target) -> tuple[str, str]:
    """The INT8 preset for the engine that runs the model (TensorRT's execution provider: ``tensorrt``), else for the
    profile's ISA (x86 VNNI or AVX2, Arm dot-product...), and why."""
    from edgeopt.converters.quantize.presets import preset_for_profile

    provider = dict(target.settings).get("provider") if target is not None else None
    preset, why = preset_for_profile(profile, provider)
    return preset.name, why


def _channel_multiple(profile, target, precision) -> tuple[int, str]:
    """The channel multiple the profile's unit running this backend likes (prune's round_to), and why."""
    from edgeopt.converters.prune import channel_multiple

    return channel_multiple(profile, dict(target.settings) if target else {}, precision)


def _enum(cls, value, flag: str):
    try:
        return cls(value)
    except ValueError as err:
        names = [m.value for m in cls]
        raise UsageError(f"{flag} '{value}' is not one of {', '.join(names)}",
                         did_you_mean(str(value), names) or f"use one of: {', '.join(names)}") from err


def _check_quant_mode(bcls, backend_name, prec: Precision, mode: QuantMode, warnings: list[str]) -> None:
    """A pinned ``--quant-mode`` must be one the backend's quantizer offers (and only means something for INT8)."""
    if mode == QuantMode.AUTO:
        return
    if prec != Precision.INT8:
        warnings.append(f"--quant-mode {mode.value} does nothing at --precision {prec.value} (it picks the kind of INT8)")
        return
    from edgeopt.converters.registry import resolve

    offered = resolve(bcls.quantizer).modes if bcls.quantizer else ()
    if mode not in offered:
        names = [m.value for m in QuantMode if m in offered] + [QuantMode.AUTO.value]  # in the enum's order
        raise UsageError(f"--quant-mode {mode.value}: backend '{backend_name.value}' does not offer {mode.value} INT8 "
                         f"(it offers {', '.join(names)})",
                         f"use --quant-mode {' or '.join(names)}, or another --backend")


def _prune_value(value) -> tuple[float, bool]:
    """(ratio, auto) from the request's ``prune`` (already 'auto' or a number: ChainRequest parses it) or the
    profile's default ratio."""
    return (0.0, True) if value == "auto" else (float(value), False)


def make_plan(profile, request: ChainRequest | None = None, *, recipe: ChainRequest | str | Path | None = None,
              input_shapes: dict[str, tuple[int, ...]] | None = None, **options) -> Plan:
    """The ordered stages for ``profile`` with the user's overrides: ``recipe`` (a file or a
    :class:`Recipe`), then ``request`` or the same chain options as keywords (``precision="int8"``;
    an unknown keyword is exit 2 with "did you mean")."""
    r = _request(request, recipe, options)
    warnings: list[str] = []
    resolved = _resolve_options(profile, r, input_shapes, warnings)
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


def _pick(value, default):
    return value if value is not None else default


def _resolve_options(profile, r: ChainRequest, input_shapes, warnings: list[str]) -> ChainOptions:
    """The request resolved over the profile's defaults into :class:`ChainOptions` (the backend chosen, every
    profile-dependent choice settled), with the checks that need the profile or several options together."""
    backend_name = choose_backend(profile, _pick(r.backend, None), warnings)
    bcls = backend_class(backend_name)
    chain = profile.default_chain
    prec = _enum(Precision, _pick(r.precision, chain.precision), "--precision")
    if prec not in bcls.precisions:
        raise UsageError(f"backend '{backend_name.value}' cannot make {prec.value} models",
                         f"use --precision {' or '.join(p.value for p in bcls.precisions)}")
    from edgeopt.float_precisions import check_native, native_float_precisions

    check_native(profile, backend_name, prec)  # bf16 only where the profile's unit runs it natively
    quant_mode = _enum(QuantMode, _pick(r.quant_mode, QuantMode.AUTO), "--quant-mode")
    _check_quant_mode(bcls, backend_name, prec, quant_mode, warnings)
    # 2:4 only when asked for (--prune-mode 2:4, a recipe): a profile's sparsity_2_4 says its hardware can use it
    mode = _enum(PruneMode, _pick(r.prune_mode, PruneMode.CHANNELS), "--prune-mode")
    _check_stage_names(r, backend_name)
    prune_value, prune_auto = _prune_value(_pick(r.prune, chain.prune))
    _check_prune_auto(prune_auto, mode, r.max_accuracy_drop)
    if r.export_c and "export_c" not in bcls.Config.model_fields:
        raise UsageError(f"--export-c writes the model as a C array for firmware; backend '{backend_name.value}' "
                         "has no such output", "use --backend tflite, or drop --export-c")
    if r.c_name and not r.export_c:
        raise UsageError("c_name names the C array of export_c, which is off", "give export_c too, or drop c_name")
    target = profile.backend(backend_name)
    try:
        options = ChainOptions(
            backend=backend_name,
            precision=prec,
            quant_mode=quant_mode,
            prune=prune_value,
            prune_auto=prune_auto,
            prune_mode=mode,
            recover=_pick(r.recover, None),
            bound=r.accuracy_bound(),
            given=r.stage_options(),
            threads=r.threads,
            backend_settings=_settings_with_memory(profile, target),
            stage_overrides=dict(r.stages),
            input_shapes=dict(input_shapes or {}),
            prune_channel_multiple=_channel_multiple(profile, target, prec),
            quant_preset=_quant_preset(profile, target),
            profile_name=profile.name,
            profile_has_gpu=profile.unit(UnitKind.GPU) is not None,
            sparse_units=tuple(u.kind.value for u in profile.compute_units if u.sparse_peak_gops is not None),
            native_floats=tuple(p.value for p in native_float_precisions(profile, backend_name)),
        )
    except ValidationError as err:
        raise _validation_message(err, "options", list(ChainOptions.model_fields)) from err
    if not 0.0 <= options.prune < 1.0:
        raise UsageError(f"--prune {options.prune} is out of range", "give a fraction in [0, 1), e.g. --prune 0.3")
    return options


def _check_unplanned_overrides(options: ChainOptions, planned: set[str], warnings: list[str]) -> None:
    """Overrides of a stage this plan does not run are still checked (an unknown key is an error, never dropped)
    and named in a warning: they do nothing here."""
    for name, override in options.stage_overrides.items():
        if name in planned or not override:
            continue
        config_cls = _stage_class(name).Config
        try:
            config_cls.model_validate(_deep_merge(config_cls().model_dump(), override))
        except ValidationError as err:
            raise _validation_message(err, f"recipe stages.{name}", config_cls) from err
        warnings.append(f"stages.{name} ({', '.join(override)}) does nothing: this plan runs no {name} stage")


def _check_stage_names(r: ChainRequest, backend_name: BackendName) -> None:
    stage_names = ["normalize", "prune", "recover", "quantize", "early_exit", backend_name.value]
    for key in r.stages:
        if key not in stage_names:
            raise BadInputError(f"recipe: unknown stage '{key}' in 'stages'",
                                did_you_mean(key, stage_names) or f"stages: {', '.join(stage_names)}")


def _check_prune_auto(prune_auto: bool, mode: PruneMode, bound: float | None) -> None:
    if prune_auto and mode != PruneMode.CHANNELS:
        raise UsageError(f"--prune auto searches a ratio of channel pruning, not --prune-mode {mode.value}",
                         "use --prune-mode channels, or give no --prune")
    if prune_auto and bound is None:
        raise UsageError("--prune auto needs a bound: --max-accuracy-drop POINTS (the largest ratio within it is "
                         "kept)", "e.g. --max-accuracy-drop 1: points of the task metric (top-1, or agreement with FP32)")


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
        wanted.append("quantize")
    wanted.append("early_exit")  # its configure says whether it runs (--early-exit)
    return wanted


def _settings_with_memory(profile, target) -> dict:
    """The profile's settings for the backend; a microcontroller target (``micro``) gets the profile's flash and
    RAM, so the firmware step checks against them (and the plan hash follows an edit of them)."""
    settings = dict(target.settings) if target else {}
    if isinstance(settings.get("micro"), dict):
        settings["micro"] = {**settings["micro"], "flash_bytes": profile.memory.flash_bytes,
                             "ram_bytes": profile.memory.budget_bytes}
    return settings
