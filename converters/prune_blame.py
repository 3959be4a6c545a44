"""When a gate fails after a pruning stage: how much of the loss pruning alone caused, and the flag that turns it off.

Every accuracy figure counts from the user's unpruned FP32 model (``ChainContext.reference_for``). A failed gate
(the INT8 search's or the final one) of a chain that pruned is measured once more here: the pruned FP32 model (the
prune/recover stages' output, before any quantization) against the unpruned one with the same metric on the same
data. When that alone takes half the bound or more, the error says so and its hint names the flag that turns the
pruning off; otherwise the figure is added as a note.
"""

from __future__ import annotations

from pathlib import Path

from edgeopt.converters.base import ChainOptions, PruneMode
from edgeopt.errors import GateFailedError

MAJOR_SHARE = 0.5  # pruning alone taking this share of the bound (or more) is named as the cause


def turn_off_flag(options: ChainOptions) -> str:
    """The flag that runs the same chain without its pruning."""
    if options.prune_mode == PruneMode.SPARSE_2_4:
        return "drop --prune-mode 2:4 (or a recipe's prune_mode: 2:4); 2:4 is opt-in"
    if options.prune_auto:
        return "--prune 0 (no pruning), or keep --prune auto with a larger --recover-budget"
    what = "--prune 0 (no pruning), or a smaller ratio"
    return what + ("" if options.recover is not False else ", with recovery (drop --no-recover)")


def what_pruned(options: ChainOptions) -> str:
    if options.prune_mode == PruneMode.SPARSE_2_4:
        return "2:4 sparsity (magnitude, not fine-tuned)"
    return "channel pruning (--prune auto)" if options.prune_auto else f"channel pruning (--prune {options.prune:g})"


def pruning_drop(pruned_model: Path, reference_model: Path, data, *, metric=None, threads: int | None = None,
                 search_path=None) -> dict:
    """The pruned FP32 model scored against the unpruned one (the gate's metric, chosen from the unpruned outputs)."""
    from edgeopt.metrics import metric_for_outputs
    from edgeopt.runtime.run_fn import run_fn

    ref, pruned = run_fn(Path(reference_model), threads), run_fn(Path(pruned_model), threads)
    feeds = list(data.feeds())
    m = metric_for_outputs([ref(f) for f in feeds], data.labels, metric, search_path=search_path)
    value = m.score_outputs([pruned(f) for f in feeds])
    return {"metric": m.name, "unpruned": round(m.fp32_value, 4), "pruned_fp32": round(value, 4),
            "drop": round(m.fp32_value - value, 4), "samples": len(feeds)}


def blame_pruning(err: GateFailedError, ctx, options: ChainOptions, data, *, search_path=None) -> GateFailedError:
    """``err`` with what pruning alone cost; ``err`` itself when nothing was pruned or it can't be measured."""
    if ctx.pruned_model is None or data is None or not len(data) or options.bound.max_accuracy_drop is None:
        return err
    try:
        share = pruning_drop(ctx.pruned_model, ctx.reference_model, data, metric=options.bound.metric,
                             threads=ctx.threads, search_path=search_path)
    except Exception as measure_err:  # noqa: BLE001 - the gate's own verdict stands; the blame is extra
        err.details["pruning"] = {"not_measured": f"{type(measure_err).__name__}: {measure_err}"[:200]}
        return err
    bound, drop, what = options.bound.max_accuracy_drop, share["drop"], what_pruned(options)
    share.update(stage=what, turn_off=turn_off_flag(options))
    figures = (f"{what} alone, at FP32, takes {share['metric']} from {share['unpruned']:.2f} to "
               f"{share['pruned_fp32']:.2f} (drop {drop:.2f}) on {share['samples']} samples")
    if drop < MAJOR_SHARE * bound:
        out = GateFailedError(f"{err.message}; {figures}, not the main cause", err.hint,
                              details={**err.details, "pruning": share})
    else:
        verdict = "over the bound by itself" if drop > bound else f"{drop / bound:.0%} of the {bound:g} allowed"
        share["main_cause"] = True  # another backend would fail the same way (edgeopt/backend_fallback.py)
        out = GateFailedError(f"{err.message}; the loss comes from the pruning stage: {figures}, {verdict}",
                              f"turn the pruning off: {share['turn_off']}", details={**err.details, "pruning": share})
    return out
