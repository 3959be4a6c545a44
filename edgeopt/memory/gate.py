"""The memory gate of ``convert``: the plan's predicted peak against the budget, before any work.

Over the budget, it tries what shrinks memory while the accuracy bound still judges the result (the
artifact's validation gate runs as for every build): INT8 weights only (``quant_mode weights``), then
static INT8 (weights and activations); the first predicted to fit is built, and the warning says which.
When none fits: exit 5 with the figures, nothing written.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from edgeopt.enums import Precision, QuantMode
from edgeopt.errors import GateFailedError
from edgeopt.memory.fit import MemoryFit
from edgeopt.memory.predict import MemoryPrediction, predict_memory, size_text

if TYPE_CHECKING:
    from edgeopt.manifest_types import StageEntry


def budget_of(profile, options) -> tuple[int, str]:
    """(bytes, where the figure comes from): ``--memory-budget``, else the recipe's ``memory_budget``, else the
    profile's ``budget_mb``, else its RAM."""
    if getattr(options, "memory_budget", None):
        return int(options.memory_budget), "--memory-budget"
    recipe = getattr(options, "recipe", None)
    if recipe is not None:
        from edgeopt.plan import load_recipe

        r = recipe if not isinstance(recipe, (str, os.PathLike)) else load_recipe(recipe)
        if getattr(r, "memory_budget", None):
            return int(r.memory_budget), "the recipe's memory_budget"
    m = profile.memory
    if m.budget_mb is not None:
        return m.budget_bytes, f"{profile.name}'s memory.budget_mb"
    return m.ram_bytes, f"{profile.name}'s {'SRAM' if m.is_microcontroller else 'RAM'}"


def _predict(model, plan, shapes, precision: Precision, mode: QuantMode | None) -> MemoryPrediction:
    micro = "micro" in plan.options.backend_settings
    p = precision
    pred = predict_memory(model, plan.backend.value, p, input_shapes=shapes, microcontroller=micro)
    if mode in (QuantMode.WEIGHTS, QuantMode.DYNAMIC):  # INT8 weights, float activations held in memory
        act = predict_memory(model, plan.backend.value, Precision.FP32, input_shapes=shapes, microcontroller=micro)
        pred = pred.model_copy(update={"arena_bytes": act.arena_bytes, "live_bytes": act.live_bytes,
                                       "total_bytes": pred.total_bytes - pred.arena_bytes + act.arena_bytes})
    return pred


def _weights_mode(plan) -> QuantMode | None:
    """The backend's weight-only INT8 mode (INT8 weights, float activations), or None where it has none (ONNX
    Runtime: its dynamic INT8 is refused on convolutional models, so static INT8 is what is tried)."""
    from edgeopt.converters.registry import get_backend, resolve

    bcls = get_backend(plan.backend.value)
    offered = resolve(bcls.quantizer).modes if bcls.quantizer else ()
    return next((m for m in (QuantMode.WEIGHTS,) if m in offered), None)


def _needs(pred: MemoryPrediction) -> str:
    """The RAM a prediction needs with its parts; on a microcontroller, also the weights it keeps in flash."""
    flash = f"; weights {size_text(pred.flash_bytes)} stay in flash" if pred.weights_in_flash and pred.flash_bytes else ""
    return pred.figures()[:-1] + flash + ")"


def _flash_holds(pred: MemoryPrediction, profile) -> None:
    """On a microcontroller, the weights (INT8, kept in flash) against the profile's flash, before any work: exit
    5 when they alone do not fit (the firmware's code comes on top)."""
    flash = profile.memory.flash_bytes
    if not (pred.weights_in_flash and flash and pred.flash_bytes and pred.flash_bytes > flash):
        return
    raise GateFailedError(
        f"memory: tflite {pred.precision} weights need {size_text(pred.flash_bytes)} of flash, {profile.name} has "
        f"{size_text(flash)} (its memory.flash_kb); nothing was converted",
        "prune the model (--prune), or choose a device with more flash",
        details={"predicted": _lean(pred).model_dump(mode="json"), "flash_bytes": flash})


def _batch_one(model, plan, shapes, budget: int) -> str:
    """The hint's clause for a batch over 1 that was asked for, when the same build at batch 1 fits ('' else): the
    batch is the model's interface, so the gate names it instead of changing it."""
    shapes = dict(shapes or {})
    big = {n: s for n, s in shapes.items() if s and isinstance(s[0], int) and s[0] > 1}
    if not big:
        return ""
    one = {**shapes, **{n: (1, *s[1:]) for n, s in big.items()}}
    try:
        pred = _predict(model, plan, one, plan.precision, plan.options.quant_mode)
    except Exception:  # noqa: BLE001 - no hint rather than a second error
        return ""
    if pred.total_bytes > budget:
        return ""
    flags = " ".join(f"--input-shape {n}={'x'.join(str(d) for d in s)}" for n, s in one.items() if n in big)
    return f"use batch 1 ({flags}: {size_text(pred.total_bytes)}, which fits), "


def _lean(pred: MemoryPrediction) -> MemoryPrediction:
    return pred.model_copy(update={"live_bytes": [], "node_names": []})


def fit_before_work(model, profile, options, plan, shapes, warn, replan):
    """(options, plan, MemoryFit): the plan as made when it fits; else the first of INT8 weights / static INT8
    predicted to fit, re-planned with ``replan(options)``; else exit 5 with the figures."""
    budget, source = budget_of(profile, options)
    asked = plan.precision
    try:
        pred = _predict(model, plan, shapes, asked, plan.options.quant_mode)
    except Exception as err:  # noqa: BLE001 - a model the estimate can't read: the run's own checks name it
        first = (str(getattr(err, "message", err)).strip().splitlines() or [type(err).__name__])[0][:160]
        warn(f"memory: not predicted ({first}); the build is not held to the {size_text(budget)} budget")
        return options, plan, None
    _flash_holds(pred, profile)
    if pred.total_bytes <= budget:
        return options, plan, MemoryFit(predicted=_lean(pred), budget_bytes=budget, budget_source=source, fits=True)
    tried = [f"{asked.value}: {pred.figures()}"]
    light = _weights_mode(plan)
    steps = [] if asked == Precision.INT8 or light is None else [(Precision.INT8, light)]
    if not (asked == Precision.INT8 and plan.options.quant_mode in (QuantMode.STATIC, QuantMode.AUTO)):
        steps.append((Precision.INT8, QuantMode.STATIC))
    for precision, mode in steps:
        if mode != QuantMode.STATIC and "micro" in plan.options.backend_settings:
            continue  # TFLite Micro runs integer kernels: weight-only INT8 is no microcontroller model
        cand = _predict(model, plan, shapes, precision, mode)
        label = f"int8 {mode.value}"
        tried.append(f"{label}: {cand.figures()}")
        if cand.total_bytes <= budget:
            new = options.model_copy(update={"precision": precision, "quant_mode": mode})
            new_plan = replan(new)
            warn(f"memory: {asked.value} needs {pred.figures()}, over the {size_text(budget)} budget "
                 f"({source}); {label} fits ({cand.figures()}), so it is built (the accuracy bound still applies)")
            adapted = {"requested": asked.value, "requested_bytes": pred.total_bytes, "chosen": label}
            return new, new_plan, MemoryFit(predicted=_lean(cand), budget_bytes=budget, budget_source=source,
                                            fits=True, adapted=adapted)
    raise GateFailedError(
        f"memory: {plan.backend.value} {asked.value} needs {_needs(pred)}, {profile.name} has {size_text(budget)} ({source}); "
        + (f"tried {'; '.join(tried[1:])}" if tried[1:] else f"{tried[0].split(':')[0]} is the smallest build tried"),
        "prune the model (--prune), " + _batch_one(model, plan, shapes, budget)
        + "give a larger --memory-budget, or choose a device with more memory",
        details={"predicted": _lean(pred).model_dump(mode="json"), "budget_bytes": budget, "budget_source": source,
                 "tried": tried})


def least_refusal(failures: list) -> tuple | None:
    """Of ``[(backend, error)]``, every one a memory refusal (its details hold the prediction): the one that
    needs the least, as (backend, error); None when any failed for another reason."""
    needs = [(getattr(e, "details", None) or {}).get("predicted", {}).get("total_bytes") for _, e in failures]
    if not failures or any(n is None for n in needs):
        return None
    return failures[needs.index(min(needs))]


USER_BUDGETS = ("--memory-budget", "the recipe's memory_budget")  # budget sources a user set: measured at convert


def fit_of_artifact(model, plan, shapes, before: MemoryFit, stages: list[StageEntry] = (), *,
                    artifact_dir=None, threads: int | None = None) -> MemoryFit:
    """The record for the manifest: the prediction at the plan's precision (what was built) and what was measured:
    for a microcontroller build, what TFLite Micro measured (the arena found, its allocator's split, the flash);
    under a budget the user set, the written artifact's peak resident memory on this host (a child process, the
    artifact's runtime: load, first inference, steady runs), with the error of the prediction."""
    pred = _predict(model, plan, shapes, plan.precision, plan.options.quant_mode)
    measured = None
    micro = next((s.report["micro"] for s in stages if s.report.get("micro")), None)
    if micro:
        arena = micro.get("arena") or {}
        measured = {"arena_bytes": arena.get("arena_bytes"), "tflm_allocations": arena.get("allocations"),
                    "flash_bytes": (micro.get("firmware") or {}).get("flash_bytes"),
                    "method": "TFLite Micro's recording allocator at the smallest arena that runs (bisection); flash: "
                              "arm-none-eabi-size of the compiled image"}
    elif artifact_dir is not None and before.budget_source in USER_BUDGETS:
        measured = measured_here(artifact_dir, pred.total_bytes, threads)
    return before.model_copy(update={"predicted": _lean(pred), "fits": pred.total_bytes <= before.budget_bytes,
                                     "measured": measured})


def measured_here(artifact_dir, predicted_bytes: int, threads: int | None) -> dict:
    """The artifact's peak resident memory on this host (:func:`edgeopt.memory.measure.measure_peak`), where it
    was measured and the prediction's error; ``error`` instead when the artifact does not run here."""
    import platform

    from .measure import measure_peak

    m = measure_peak(artifact_dir, runs=3, threads=threads)
    m["where"] = f"this host ({platform.machine()}), the artifact's runtime"
    if "peak_bytes" in m and m["peak_bytes"] > 0:
        m["error_pct"] = round(100 * (predicted_bytes - m["peak_bytes"]) / m["peak_bytes"], 1)
    return m
