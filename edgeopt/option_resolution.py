"""The chain request resolved over the device profile into :class:`ChainOptions`: the backend chosen, every
profile-dependent choice settled (INT8 preset, prune's channel multiple, native floats, a microcontroller's memory),
with the checks that need the profile or several options together."""

from __future__ import annotations

from pydantic import ValidationError

from edgeopt.backend_choice import backend_class, choose_backend
from edgeopt.config_errors import validation_message
from edgeopt.converters.base import ChainOptions, PruneMode, is_chain_option
from edgeopt.enums import BackendName, Precision, QuantMode, UnitKind
from edgeopt.errors import BadInputError, UsageError, did_you_mean, did_you_mean_renamed
from edgeopt.options import ChainRequest


def _enum(cls, value, flag: str):
    try:
        return cls(value)
    except ValueError as err:
        names = [m.value for m in cls]
        raise UsageError(f"{flag} '{value}' is not one of {', '.join(names)}",
                         did_you_mean(str(value), names) or f"use one of: {', '.join(names)}") from err


def _check_quant_mode(bcls, options: ChainOptions, warnings: list[str]) -> None:
    """A pinned ``--quant-mode`` must be one the backend's quantizer offers (and only means something for INT8)."""
    mode, prec, backend_name = options.quant_mode, options.precision, options.backend
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


def _asked(r: ChainRequest) -> dict:
    """The chain-level options the request gives as such (None: not given, so the declaration's default holds);
    backend, precision and prune are resolved over the profile below."""
    return {name: getattr(r, name) for name, info in ChainOptions.model_fields.items()
            if is_chain_option(info) and name not in ("backend", "precision", "prune") and getattr(r, name) is not None}


def resolve_options(profile, r: ChainRequest, input_shapes, warnings: list[str]) -> ChainOptions:
    """The request resolved over the profile's defaults into :class:`ChainOptions` (the backend chosen, every
    profile-dependent choice settled), with the checks that need the profile or several options together."""
    backend_name = choose_backend(profile, r.backend, warnings)
    bcls = backend_class(backend_name)
    chain = profile.default_chain
    prec = _enum(Precision, r.precision if r.precision is not None else chain.precision, "--precision")
    if prec not in bcls.precisions:
        raise UsageError(f"backend '{backend_name.value}' cannot make {prec.value} models",
                         f"use --precision {' or '.join(p.value for p in bcls.precisions)}")
    from edgeopt.float_precisions import check_native, native_float_precisions

    check_native(profile, backend_name, prec)  # bf16 only where the profile's unit runs it natively
    prune = r.prune if r.prune is not None else chain.prune
    target = profile.backend(backend_name)
    stages = _stage_overrides(r, backend_name, warnings)
    try:
        options = ChainOptions(
            **{**_asked(r), "stages": stages},
            backend=backend_name,
            precision=prec,
            prune=0.0 if prune == "auto" else float(prune),
            prune_auto=prune == "auto",
            bound=r.accuracy_bound(),
            given=r.stage_options(),
            backend_settings=_settings_with_memory(profile, target),
            input_shapes=dict(input_shapes or {}),
            prune_channel_multiple=_channel_multiple(profile, target, prec),
            quant_preset=_quant_preset(profile, target),
            profile_name=profile.name,
            profile_has_gpu=profile.unit(UnitKind.GPU) is not None,
            sparse_units=tuple(u.kind.value for u in profile.compute_units if u.sparse_peak_gops is not None),
            native_floats=tuple(p.value for p in native_float_precisions(profile, backend_name)),
        )
    except ValidationError as err:
        raise validation_message(err, "options", list(ChainOptions.model_fields)) from err
    _check_quant_mode(bcls, options, warnings)
    # 2:4 only when asked for (--prune-mode 2:4, a recipe): a profile's sparsity_2_4 says its hardware can use it
    _check_prune_auto(options)
    if r.export_c and "export_c" not in bcls.Config.model_fields:
        raise UsageError(f"--export-c writes the model as a C array for firmware; backend '{backend_name.value}' "
                         "has no such output", "use --backend tflite, or drop --export-c")
    if r.c_name and not r.export_c:
        raise UsageError("c_name names the C array of export_c, which is off", "give export_c too, or drop c_name")
    if not 0.0 <= options.prune < 1.0:
        raise UsageError(f"--prune {options.prune} is out of range", "give a fraction in [0, 1), e.g. --prune 0.3")
    return options


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


def _stage_overrides(r: ChainRequest, backend_name: BackendName, warnings: list[str]) -> dict:
    """The request's per-stage overrides (recipe ``stages:``, ``--set``) by stage name: every name the user gave is
    checked here, an old one (``quantize``) read as the stage's name now (``qdq``) with a warning."""
    from edgeopt.converters.registry import STAGE_ALIASES, canonical_stage_overrides, stage_names

    names = [*stage_names(), backend_name.value]
    for key in r.stages:
        if key not in names and key not in STAGE_ALIASES:
            hint = did_you_mean(key, names) or did_you_mean_renamed(key, STAGE_ALIASES)  # 'quantise': 'qdq'
            raise BadInputError(f"recipe: unknown stage '{key}' in 'stages'", hint or f"stages: {', '.join(names)}")
    return canonical_stage_overrides(r.stages, warnings.append)


def _check_prune_auto(options: ChainOptions) -> None:
    if options.prune_auto and options.prune_mode != PruneMode.CHANNELS:
        raise UsageError(f"--prune auto searches a ratio of channel pruning, not --prune-mode {options.prune_mode.value}",
                         "use --prune-mode channels, or give no --prune")
    if options.prune_auto and options.bound.max_accuracy_drop is None:
        raise UsageError("--prune auto needs a bound: --max-accuracy-drop POINTS (the largest ratio within it is "
                         "kept)", "e.g. --max-accuracy-drop 1: points of the task metric (top-1, or agreement with FP32)")


def _settings_with_memory(profile, target) -> dict:
    """The profile's settings for the backend; a microcontroller target (``micro``) gets the profile's flash and
    RAM, so the firmware step checks against them (and the plan hash follows an edit of them)."""
    settings = dict(target.settings) if target else {}
    if isinstance(settings.get("micro"), dict):
        settings["micro"] = {**settings["micro"], "flash_bytes": profile.memory.flash_bytes,
                             "ram_bytes": profile.memory.budget_bytes}
    return settings
