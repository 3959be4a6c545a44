"""Channel pruning of an ONNX graph at a ratio (:mod:`edgeopt.converters.prune`): the channels each group of Convs
keeps, the skip list as the graph's node names, and the rewritten model with its report (FLOPs and params before
and after, per-layer channels, skips, bias compensation)."""

from __future__ import annotations

from edgeopt.converters.base import PruneMode
from edgeopt.converters.prune_config import PruneConfig
from edgeopt.errors import StageError

FINE_TUNE_NOTE = (
    "this stage does no fine-tuning: outputs of a pruned model drift from the original. The recover stage "
    "(converters/recover.py, the train extra, --recover) distils the pruned model from FP32 on --calib."
)


def _skip_names(ix, wanted: tuple[str, ...]) -> set[str]:
    """The skip list as this graph's node names: a Conv may be named by its node name or its output tensor (the
    normalized graph renames nodes after their outputs, the original model shows node names). An unknown name is
    an error with "did you mean": a skip list that silently matches nothing prunes what the user meant to keep."""
    from edgeopt.errors import BadInputError, did_you_mean

    alias: dict[str, str] = {}
    for i, n in enumerate(ix.nodes):
        if n.op_type != "Conv":
            continue
        name = ix.name(i)  # the normalized graph names /0/Conv's node "/0/Conv_output_0"
        short = name[: -len("_output_0")] if name.endswith("_output_0") else name
        for key in (short, name, *n.output[:1]):
            alias.setdefault(key, name)
    shown = [k for k, v in alias.items() if not k.endswith("_output_0")]
    unknown = [w for w in wanted if w not in alias]
    if unknown:
        raise BadInputError(f"prune: skip names no Conv of this model: {', '.join(unknown)}",
                            did_you_mean(unknown[0], list(alias)) or "name Convs as the model names its Conv nodes "
                            f"(this one has {', '.join(shown[:4])}{', ...' if len(shown) > 4 else ''})")
    return {alias[w] for w in wanted}


def _kept_channels(ix, grp, skip: set[str], config: PruneConfig) -> tuple[int, str | None]:
    """Channels the group keeps at ``config.ratio``, and why it is left whole (None: it is pruned)."""
    from edgeopt.converters import prune_apply

    outs = {ix.name(m) for m in [grp.root, *grp.producers, *grp.depthwise]}  # nodes whose outputs shrink
    listed = sorted(outs & skip)
    reason = grp.unsafe or (f"in the skip list ({', '.join(listed)})" if listed else None)
    if reason is None and not grp.producers:
        reason = "no prunable producer"
    n_keep = grp.channels if reason else prune_apply.kept_count(grp.channels, config.ratio, config.min_channels, config.round_to)
    if reason is None and n_keep >= grp.channels:
        reason = f"ratio removes no channel of {grp.channels} (min_channels {config.min_channels}, round_to {config.round_to})"
    return (grp.channels if reason else n_keep), reason


def kept_channels_at(model, config: PruneConfig):
    """``ratio -> (channels kept by each group, …)`` for ``model``: graph analysis only, no rewrite. ``--prune auto``
    tries ratios that keep the same channels once (16-channel rounding on AVX-512 made 0.1, 0.2 and 0.3 one
    model on the digits CNN)."""
    from edgeopt.converters import prune_apply
    from edgeopt.converters.prune_graph import GraphIndex, find_groups

    ix = GraphIndex(prune_apply.constants_to_initializers(model))
    groups, skip = find_groups(ix), _skip_names(ix, config.skip)

    def at(ratio: float) -> tuple[int, ...]:
        c = config.model_copy(update={"ratio": ratio})
        return tuple(_kept_channels(ix, g, skip, c)[0] for g in groups)

    return at


def prune_channels(model, config: PruneConfig, calib_feeds: list[dict] | None = None):
    """The channel-pruned model and the report (FLOPs/params before and after, per-layer channels, skips)."""
    from edgeopt.converters import prune_apply
    from edgeopt.converters.prune_graph import GraphIndex, find_groups, model_cost

    model = prune_apply.constants_to_initializers(model)
    ix = GraphIndex(model)
    before = model_cost(model)
    plan, layers, skipped = [], {}, {}
    skip = _skip_names(ix, config.skip)
    for grp in find_groups(ix):
        names = sorted({ix.name(p) for p in [grp.root, *grp.producers]}, key=lambda n: n)
        n_keep, reason = _kept_channels(ix, grp, skip, config)
        if reason:
            for n in names:
                skipped[n] = reason
            continue
        keep = prune_apply.keep_indices(prune_apply.channel_scores(ix, grp), n_keep)
        plan.append((grp, keep))
        shared = names if len(names) > 1 else None
        for n in names:
            layers[n] = {"channels_before": grp.channels, "channels_after": int(n_keep), "shared_mask_with": shared}
        for d in grp.depthwise:
            layers[ix.name(d)] = {"channels_before": grp.channels, "channels_after": int(n_keep),
                                  "depthwise_follows": names}
    for i, node in enumerate(ix.nodes):  # Convs no group started from (grouped, non-constant weights, …)
        if node.op_type == "Conv" and ix.name(i) not in layers and ix.name(i) not in skipped:
            kind = ix.conv_kind(i)
            if kind != "depthwise":
                skipped[ix.name(i)] = "grouped Conv or non-constant weights: not a pruning root"
            elif not any(i in g.depthwise for g, _ in plan):
                skipped[ix.name(i)] = "depthwise: its channels follow its input's producer, which is not pruned"
    compensation = {"applied": False, "reason": "disabled in the config" if not config.bias_compensation
                    else "no calibration data" if not calib_feeds else "nothing pruned"}
    try:
        pruned = prune_apply.apply(model, ix, plan) if plan else model
        if plan and config.bias_compensation and calib_feeds:
            means = prune_apply.consumer_input_means(model, ix, plan, calib_feeds)
            deltas, missed = prune_apply.bias_compensation(ix, plan, means)
            prune_apply.add_to_bias(pruned, ix, plan, deltas)
            compensation = {"applied": True, "samples": len(calib_feeds), "layers": [ix.name(i) for i in deltas],
                            "not_compensated": missed}
        pruned = prune_apply.finish(pruned, model) if plan else model
    except Exception as err:  # noqa: BLE001 - a rewrite the checker rejects is our bug, reported in one line
        raise StageError(f"prune: the rewritten graph is inconsistent ({type(err).__name__}: {str(err)[:160]})",
                         "leave the Conv out with the prune stage's skip list (recipe stages: {prune: {skip: [...]}}), "
                         "or --prune 0") from err
    after = model_cost(pruned)
    report = {
        "mode": PruneMode.CHANNELS.value,
        "ratio": config.ratio,
        "criterion": config.criterion.value,
        "changed": bool(plan),
        "flops_before": before["flops"], "flops_after": after["flops"],
        "params_before": before["params"], "params_after": after["params"],
        "flops_reduction": 1 - after["flops"] / before["flops"] if before["flops"] else 0.0,
        "params_reduction": 1 - after["params"] / before["params"] if before["params"] else 0.0,
        "flops_counted": "2 x MACs of Conv, Gemm and MatMul (symbolic dims count as 1)",
        "residual_policy": "Convs whose channels meet at Add/Mul share one mask (summed mean-normalised L1 norms)",
        "layers": layers,
        "skipped": skipped,
        "bias_compensation": compensation,
        "fine_tuning": FINE_TUNE_NOTE,
    }
    return pruned, report
