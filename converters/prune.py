"""The ``prune`` stage: structured channel pruning of ONNX Convs, or 2:4 semi-structured sparsity.

Channels mode removes output channels for real (smaller initializers, new shapes) and everything that
follows them (see :mod:`edgeopt.converters.prune_graph`); Convs that meet at a residual Add share one mask,
and Convs whose channels reach something the analysis does not understand are left alone and reported.
Removed input channels' mean activations (measured on ``ctx.calib``) are folded into each consumer's bias.
Pruning without fine-tuning changes the outputs: the cosine against the unpruned model is recorded as a
report, not a failure; the chain's validation measures the accuracy. The ``recover`` stage that follows
(:mod:`edgeopt.converters.recover`) distils the pruned model from FP32 to win the accuracy back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import (
    ChainContext,
    ChainOptions,
    Intermediate,
    PruneMode,
    RunFacts,
    Stage,
    StageConfig,
    StageRecord,
)
from edgeopt.converters.recover import RecoverConfig
from edgeopt.converters.registry import register_stage
from edgeopt.enums import StrEnum
from edgeopt.errors import StageError, UsageError
from edgeopt.files import atomic_path

FINE_TUNE_NOTE = (
    "this stage does no fine-tuning: outputs of a pruned model drift from the original. The recover stage "
    "(converters/recover.py, the train extra, --recover) distils the pruned model from FP32 on --calib."
)


class PruneCriterion(StrEnum):
    # L1 norm of each output filter, scaled by a following BN's |gamma|/sqrt(var+eps): the norm of the filter as
    # BN folding would leave it, so the choice is the same whether or not normalize folded BN first
    L1 = "l1"


class PruneConfig(StageConfig):
    mode: PruneMode = PruneMode.CHANNELS
    ratio: float = Field(default=0.0, ge=0.0, lt=1.0)  # fraction of output channels removed per prunable Conv
    criterion: PruneCriterion = PruneCriterion.L1
    min_channels: int = Field(default=4, ge=1)  # never keep fewer channels than this
    round_to: int = Field(default=1, ge=1)  # kept channel counts rounded up to a multiple (SIMD width)
    round_to_reason: str = ""  # why the planner chose round_to from the profile (see channel_multiple)
    # 2:4 only, the planner's: the profile's units with sparse tensor cores (None: not known) and its name
    sparse_units: tuple[str, ...] | None = None
    profile_name: str | None = None
    # add the mean contribution of removed input channels (measured on ctx.calib) to each consumer's bias
    bias_compensation: bool = True
    calib_samples: int = Field(default=64, ge=1)
    skip: tuple[str, ...] = ()  # Conv names whose output channels stay (with every Conv sharing their mask)
    # --prune auto (converters/prune_auto.py): the largest ratio of auto_ratios whose recovered student stays
    # within bound.max_accuracy_drop of FP32 (bound.metric) on calibration data held back from pruning and recovery,
    # the whole search within bound.search_budget (--search-budget)
    auto: bool = False
    auto_ratios: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
    bound: AccuracyBound = AccuracyBound()  # the planner's: --max-accuracy-drop, --metric, --search-budget
    auto_holdout: float = Field(default=0.2, gt=0, lt=1)  # share of --calib that judges the candidates
    auto_recover: bool = True  # recover each candidate (False: --no-recover, judged as pruned)
    # the recover stage's planned config (its recipe overrides included) each candidate is distilled with, its
    # budget_s replaced by the candidate's share of bound.search_budget; the planner sets it (edgeopt/plan.py), so
    # --dry-run shows it and the plan hash covers it. None: the recover defaults with this config's seed
    auto_recover_config: RecoverConfig | None = None
    latency_backend: str = "onnxruntime"  # the plan's backend: the pruned-vs-unpruned timing runs on it if it can
    seed: int = 0


SPARSE_2_4_ZEROES = "2 of every 4 weights along each layer's reduction axis, the 2 smallest by magnitude"
SPARSE_2_4_WARNING = (
    "prune 2:4: half of the covered weights are zeroed by magnitude with no fine-tuning, which loses accuracy "
    "(NVIDIA's recipe prunes to 2:4, then fine-tunes with the mask fixed); --recover does not fine-tune 2:4 "
    "models (it distils channel-pruned ones only): judge the result with --eval and --max-accuracy-drop, or drop "
    "--prune-mode 2:4")


class Sparse24Config(StageConfig):
    """The prune stage in 2:4 mode, as the plan shows it: what is zeroed and that nothing fine-tunes it
    (2:4 runs only when asked for: ``--prune-mode 2:4`` or ``prune_mode: 2:4`` in a recipe)."""

    mode: Literal[PruneMode.SPARSE_2_4] = PruneMode.SPARSE_2_4
    zeroes: str = SPARSE_2_4_ZEROES
    fine_tuned: Literal[False] = False  # no stage fine-tunes a 2:4 model (recover distils channel pruning only)
    skip: tuple[str, ...] = ()  # layer names left dense
    # the planner's: the profile's units with sparse tensor cores (None: not known) and its name
    sparse_units: tuple[str, ...] | None = None
    profile_name: str | None = None


@register_stage
class Prune(Stage):
    name = "prune"
    Config = PruneConfig

    @classmethod
    def configure(cls, options: ChainOptions) -> PruneConfig | Sparse24Config | None:
        if options.prune_mode == PruneMode.CHANNELS and options.prune_auto:
            from edgeopt.converters.recover import train_extra_missing

            multiple, why = options.prune_channel_multiple
            return PruneConfig(auto=True, round_to=multiple, round_to_reason=why, latency_backend=options.backend.value,
                               bound=options.bound,
                               auto_recover=options.recover is not False and not train_extra_missing())
        if options.prune_mode == PruneMode.CHANNELS and options.prune == 0:
            return None
        if options.prune_mode == PruneMode.SPARSE_2_4:  # asked for; the profile's sparse tensor cores, from the plan
            return Sparse24Config(sparse_units=options.sparse_units, profile_name=options.profile_name)
        try:
            ratio = options.prune if options.prune_mode == PruneMode.CHANNELS else 0.0
            multiple, why = options.prune_channel_multiple
            return PruneConfig(mode=options.prune_mode, ratio=ratio, round_to=multiple, round_to_reason=why,
                               latency_backend=options.backend.value)
        except ValidationError as err:
            raise UsageError(
                f"prune ratio {options.prune} is out of range", "give the fraction of channels to remove, in [0, 1), e.g. 0.3"
            ) from err

    @classmethod
    def check_before_work(cls, config: StageConfig, facts: RunFacts) -> None:
        assert isinstance(config, (PruneConfig, Sparse24Config))
        if isinstance(config, PruneConfig) and config.mode == PruneMode.CHANNELS and config.auto:
            from edgeopt.converters.prune_auto import check_calib

            check_calib(facts.calib)

    def run(self, model: Intermediate, config: StageConfig, ctx: ChainContext) -> Intermediate:
        import onnx

        from edgeopt.model import load_onnx

        assert isinstance(config, (PruneConfig, Sparse24Config))
        if ctx.record is None:
            ctx.record = StageRecord(self.name, config.model_dump(mode="json"))
        if config.mode == PruneMode.CHANNELS and config.auto:
            from edgeopt.converters.prune_auto import search_ratio

            if config.bound.max_accuracy_drop is None:
                raise UsageError("--prune auto needs a bound: --max-accuracy-drop POINTS",
                                 "e.g. --max-accuracy-drop 1 (points of the task metric)")
            source = load_onnx(model.path)
            chosen = search_ratio(
                model, config, ctx, save=lambda m, p: _save_atomic(onnx, m, p),
                kept_at=kept_channels_at(source, config.model_copy(update={"auto": False})),
                prune_at=lambda r, feeds: prune_channels(source, config.model_copy(update={"auto": False, "ratio": r}),
                                                         feeds),
                timing=lambda before, after: latency_vs_unpruned(before, after, ctx, backend=config.latency_backend))
            if chosen.path != model.path:  # output shapes unchanged; cosine vs unpruned reported, as for a fixed ratio
                ctx.record.checks.update(_numeric_check(model.path, chosen.path, ctx))
            return chosen
        if config.mode == PruneMode.CHANNELS and config.ratio == 0:
            ctx.record.report.update({"mode": config.mode.value, "ratio": 0.0, "changed": False})
            return model
        source = load_onnx(model.path)
        if config.mode == PruneMode.SPARSE_2_4:
            from edgeopt.converters.sparsity import sparsify

            pruned, report = sparsify(source, config.skip)
            report["fine_tuned"] = False
            _warn_without_sparse_cores(config, ctx)
        else:
            calib = ctx.calib.feeds(config.calib_samples) if ctx.calib is not None and len(ctx.calib) else None
            pruned, report = prune_channels(source, config, calib)
            odd = [n for n, v in report["layers"].items() if v["channels_after"] % 8]
            if odd and config.round_to % 8:
                ctx.warn(f"prune: {len(odd)} layers keep channel counts that are not multiples of 8; ONNX Runtime CPU "
                         "ran such a MobileNet slower than unpruned here (NCHWc blocking): consider round_to 8")
        out = Path(ctx.work_dir) / f"{Path(model.path).stem}.pruned.onnx"
        _save_atomic(onnx, pruned, out)
        ctx.record.report.update(report)
        ctx.record.checks.update(_numeric_check(model.path, out, ctx))
        if config.mode == PruneMode.CHANNELS and report.get("changed"):
            ctx.record.report["latency"] = latency_vs_unpruned(model.path, out, ctx, backend=config.latency_backend)
        notes = {**model.notes, "prune": {"mode": config.mode.value, "ratio": getattr(config, "ratio", None)}}
        return Intermediate(out, model.format, model.precision, notes)


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


def _numeric_check(before: Path, after: Path, ctx: ChainContext) -> dict:
    """Runs the pruned model in ONNX Runtime: output shapes must not change; cosine vs unpruned is a report."""
    import numpy as np

    from edgeopt.converters.checks import compare, ort_run_fn

    ref, got = ort_run_fn(before, ctx.threads), ort_run_fn(after, ctx.threads)
    feeds = ctx.check_samples.feeds(8) if ctx.check_samples is not None and len(ctx.check_samples) else None
    synthetic = feeds is None
    if feeds is None:
        feeds = [_random_feed(before)]
    for feed in feeds[:1]:
        r, g = ref(feed), got(feed)
        for name in r:
            if name not in g or np.shape(r[name]) != np.shape(g[name]):
                raise StageError(f"prune: output '{name}' changed shape {np.shape(r[name])} -> {np.shape(g.get(name))}",
                                 "report this model; rerun with --prune 0")
    result = compare(ref, got, feeds)
    return {"vs_unpruned": result, "synthetic_inputs": synthetic, "output_shapes_unchanged": True,
            "note": "a report, not a gate: pruning without fine-tuning changes outputs"}


def channel_multiple(profile, settings: dict, precision) -> tuple[int, str]:
    """The multiple of output channels the unit that runs this backend computes in one step, and why:
    tensor-core tiles on a GPU (8 for FP16/FP32, 16 for INT8), the SIMD width of the CPU's kernels
    (AVX-512: 16 FP32 lanes and ORT's NCHW16c blocks; AVX/AVX2: 8; NEON: 8 output channels per INT8
    SDOT/GEMM tile, 4 FP32 lanes). 1 (no rounding) when the profile says nothing about it."""
    import json

    from edgeopt.enums import Precision

    text = json.dumps(settings, default=str).lower()
    units = {u.kind.value: u for u in getattr(profile, "compute_units", ()) or ()}
    int8 = precision == Precision.INT8
    gpu = units.get("gpu")
    if gpu is not None and any(w in text for w in ("cuda", "tensorrt")) and gpu.has_feature("tensor_cores"):
        return (16, "GPU tensor cores: INT8 tiles are 16 channels") if int8 else \
            (8, "GPU tensor cores: FP16 tiles are 8 channels")
    if any(w in text for w in ('"gpu"', '"npu"')) and ("gpu" in units or "npu" in units):
        return 16, "OpenVINO GPU/NPU: blocked layouts of 16 channels"
    cpu = units.get("cpu")
    if cpu is None:
        return 1, "the profile names no CPU or tensor-core unit for this backend"
    if cpu.has_feature("avx512"):
        return 16, "AVX-512: 16 FP32 lanes (NCHW16c-blocked kernels, VNNI INT8)"
    if cpu.has_feature("avx2") or cpu.has_feature("avx"):
        return 8, "AVX2: 8 FP32 lanes (NCHW8c-blocked kernels)"
    if cpu.has_feature("neon"):
        return (8, "NEON INT8: SDOT/GEMM kernels tile 8 output channels") if int8 else \
            (4, "NEON: 4 FP32 lanes")
    return 1, "no SIMD width known for this profile's CPU"


def latency_vs_unpruned(before: Path, after: Path, ctx: ChainContext, repeats: int = 60,
                        backend: str = "onnxruntime") -> dict:
    """The pruned model against the unpruned one, interleaved, on the plan's backend where it runs an ONNX file
    here (ONNX Runtime; OpenVINO CPU at f32 when installed), else on ONNX Runtime with a note: a quick estimate.
    A prune that is not faster says so (a warning)."""
    from edgeopt.converters.quantize.timing import interleaved_latency_ms

    feed = ctx.check_samples.feed(0) if ctx.check_samples is not None and len(ctx.check_samples) else _random_feed(before)
    run_fn, runtime, note = _timing_runtime(backend, ctx.threads)
    runs = {"unpruned": run_fn(before), "pruned": run_fn(after)}
    lat = interleaved_latency_ms(runs, feed, repeats=repeats)
    speedup = round(lat["unpruned"] / lat["pruned"], 3) if lat["pruned"] > 0 else None
    entry = {"latency_ms": lat, "speedup": speedup, "runs_each": repeats, "threads": ctx.threads,
             "runtime": runtime, "backend": backend,
             "note": "quick p50 on bench's clock before the artifact was written: an estimate, not a benchmark "
                     "(edgeopt bench measures the artifact)" + (f"; {note}" if note else "")}
    if speedup is not None and speedup < 1.05:
        entry["warning"] = (f"prune: the pruned model is not faster than the unpruned one on {runtime} "
                            f"({lat['pruned']:.3g} ms vs {lat['unpruned']:.3g} ms, x{speedup:g}; quick estimate)")
        ctx.warn(entry["warning"])
    return entry


def _timing_runtime(backend: str, threads: int | None):
    """(path -> run function, what runs it, a note when it is not the plan's backend)."""
    from edgeopt.converters.checks import ort_run_fn

    ort = "onnxruntime (CPUExecutionProvider) on this machine"
    if backend == "onnxruntime":
        return (lambda p: ort_run_fn(p, threads)), ort, None
    timer = _backend_timer(backend)
    made = timer(threads) if timer is not None else None
    if made is not None:
        return (*made, None)
    return ((lambda p: ort_run_fn(p, threads)), ort,
            f"the plan's backend {backend} is timed only after conversion (edgeopt bench): ONNX Runtime stands in")


def _backend_timer(backend: str):
    """The function the backend's class names in ``onnx_timer``, or None (an unknown backend has none)."""
    from edgeopt.converters.registry import get_backend, resolve

    try:
        ref = get_backend(backend).onnx_timer
    except Exception:  # noqa: BLE001 - a backend the registry doesn't know is timed by ONNX Runtime
        return None
    return resolve(ref) if ref else None


def _random_feed(path: Path) -> dict:
    import numpy as np

    from edgeopt.model import graph_inputs, load_onnx

    rng = np.random.default_rng(0)
    feed = {}
    for spec in graph_inputs(load_onnx(path, check=False)):
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in spec.shape]
        feed[spec.name] = rng.random(shape).astype(spec.dtype if spec.dtype != "float64" else "float32")
    return feed


def _warn_without_sparse_cores(config: PruneConfig | Sparse24Config, ctx: ChainContext) -> None:
    if not config.sparse_units:
        name = config.profile_name or "this profile"
        ctx.warn(f"prune 2:4: {name} has no unit with sparse tensor cores; the zeros will not make it faster there")


def _save_atomic(onnx, model, out: Path) -> None:
    with atomic_path(out) as tmp:
        onnx.save(model, str(tmp))
