"""The ``prune`` stage: structured channel pruning of ONNX Convs, or 2:4 semi-structured sparsity.

Channels mode removes output channels for real (smaller initializers, new shapes) and everything that
follows them (see :mod:`edgeopt.converters.prune_graph`); Convs that meet at a residual Add share one mask,
and Convs whose channels reach something the analysis does not understand are left alone and reported.
Removed input channels' mean activations (measured on ``ctx.calib``) are folded into each consumer's bias.
Pruning without fine-tuning changes the outputs: the cosine against the unpruned model is recorded as a
report, not a failure; the chain's validation measures the accuracy. The ``recover`` stage that follows
(:mod:`edgeopt.converters.recover`) distils the pruned model from FP32 to win the accuracy back.
The configs are in :mod:`.prune_config`, the channel rewrite at a ratio in :mod:`.prune_channels`, the
pruned-vs-unpruned timing in :mod:`.prune_timing`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

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
from edgeopt.converters.prune_channels import kept_channels_at, prune_channels
from edgeopt.converters.prune_config import PruneConfig, Sparse24Config
from edgeopt.converters.prune_timing import latency_vs_unpruned, random_feed
from edgeopt.converters.registry import register_stage
from edgeopt.errors import StageError, UsageError
from edgeopt.files import atomic_path


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


def _numeric_check(before: Path, after: Path, ctx: ChainContext) -> dict:
    """Runs the pruned model in ONNX Runtime: output shapes must not change; cosine vs unpruned is a report."""
    import numpy as np

    from edgeopt.converters.checks import compare
    from edgeopt.runtime.run_fn import run_fn

    ref, got = run_fn(before, ctx.threads), run_fn(after, ctx.threads)
    feeds = ctx.check_samples.feeds(8) if ctx.check_samples is not None and len(ctx.check_samples) else None
    synthetic = feeds is None
    if feeds is None:
        feeds = [random_feed(before)]
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


def _warn_without_sparse_cores(config: PruneConfig | Sparse24Config, ctx: ChainContext) -> None:
    if not config.sparse_units:
        name = config.profile_name or "this profile"
        ctx.warn(f"prune 2:4: {name} has no unit with sparse tensor cores; the zeros will not make it faster there")


def _save_atomic(onnx, model, out: Path) -> None:
    with atomic_path(out) as tmp:
        onnx.save(model, str(tmp))
