"""The ``recover`` stage: knowledge distillation from the FP32 model into the pruned one.

The teacher is the normalized FP32 model (``ctx.reference_model``); the student is the pruned model imported
into PyTorch with onnx2torch. The student is trained on the user's calibration data, which need no labels: for
a classifier the loss is KL divergence on temperature-softened logits of the teacher's output, for other
outputs mean squared error normalised by the teacher's variance (the choice follows the output kind exactly as
the accuracy metric is chosen, :mod:`edgeopt.metrics`); labels, when given, add cross-entropy. A share of the
data is held back: after each epoch the student is scored on it with the task metric, the best student is kept,
and training stops early when that figure stops improving, when the time budget runs out, or on Ctrl-C.
The best student is exported back to ONNX (``torch.onnx.export(dynamo=False)``) and checked numerically
against its torch version. Needs the ``train`` extra (torch, torchvision, onnx2torch).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

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
    user_option,
)
from edgeopt.converters.registry import register_stage
from edgeopt.deps import version_of
from edgeopt.errors import BadDataError, MissingDependencyError, StageError, UsageError
from edgeopt.files import atomic_path

TRAIN_MODULES = ("torch", "torchvision", "onnx2torch")
TRAIN_HINT = "install it with: pip install 'edgeopt[train]' (or convert with --no-recover)"
MIN_SAMPLES = 4  # fewest real --calib samples recovery distils on
EXPORT_TOLERANCE = 1e-3  # max |ONNX Runtime - torch| of the exported student, relative to the output's scale
EXPORT_LOOSE_TOLERANCE = 1e-2  # ... allowed when the outputs agree in direction to EXPORT_MIN_COSINE (deep nets)
EXPORT_MIN_COSINE = 0.99999
INTERRUPTED = "recover: interrupted (Ctrl-C); the best student so far was kept"


class RecoverConfig(StageConfig):
    budget_s: float = user_option(120.0, "Seconds for the recover stage: distilling a pruned model from FP32 "
                                         "(teacher, training, export).", name="recover_budget", gt=0)
    max_epochs: int = Field(default=60, ge=1)
    # epochs without a better held-back figure before stopping: 4 stopped the 40 %-pruned digits CNN at epoch 21
    # (-1.11 points on digits_test, unlabelled); 8 (with 60 epochs) found a better student at epoch 17 (-0.92)
    patience: int = Field(default=8, ge=1)
    lr: float = Field(default=2e-3, gt=0)  # Adam, cosine-decayed over max_epochs
    temperature: float = Field(default=4.0, gt=0)  # softening of the logits for the KL loss
    batch_size: int = Field(default=32, ge=1)
    holdout: float = Field(default=0.2, gt=0, lt=1)  # share of the calibration data held back for early stopping
    shift_px: int = Field(default=2, ge=0)  # random ± shifts of 4-D float (image) inputs while training
    label_weight: float = Field(default=0.5, ge=0, le=1)  # weight of cross-entropy on labels, when given
    seed: int = 0
    required: bool = False  # asked for explicitly (--recover): no calibration data is an error, not a skip
    # the planner's: early stopping judges the held-back samples with the bound's task metric (--metric); its other
    # fields are not read here
    bound: AccuracyBound = AccuracyBound()


def train_extra_missing() -> str | None:
    """The first module of the ``train`` extra that is not installed (None when all are); nothing imported."""
    import importlib.util

    for name in TRAIN_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def require_train():
    """(torch, onnx2torch), or exit 4 naming the ``train`` extra."""
    missing = train_extra_missing()
    if missing:
        raise MissingDependencyError(f"the recover stage needs {missing} (the 'train' extra), which is not installed",
                                     TRAIN_HINT)
    try:
        import onnx2torch
        import torch
    except Exception as err:  # noqa: BLE001 - e.g. a torchvision build that does not match torch
        raise MissingDependencyError(f"the recover stage needs the 'train' extra, which does not import here "
                                     f"({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''})",
                                     TRAIN_HINT) from err
    return torch, onnx2torch


@register_stage
class Recover(Stage):
    name = "recover"
    Config = RecoverConfig

    @classmethod
    def configure(cls, options: ChainOptions) -> RecoverConfig | None:
        pruning = options.prune > 0 or options.prune_auto
        if options.prune_mode != PruneMode.CHANNELS or not pruning or options.recover is False:
            return None
        if options.recover is None and train_extra_missing():
            return None  # auto: the plan says why (make_plan's warning)
        if options.recover:
            require_train()
        return RecoverConfig(required=bool(options.recover), **options.for_config(RecoverConfig))

    @classmethod
    def check_before_work(cls, config: StageConfig, facts: RunFacts) -> None:
        """Recovery asked for (``--recover``) needs real calibration data to distil on: none is a usage error
        (exit 2), too few samples bad data (exit 3); not asked for, the stage skips itself with a warning."""
        assert isinstance(config, RecoverConfig)
        calib = facts.calib
        if not config.required:
            return
        if calib is None or getattr(calib, "synthetic", False):
            raise UsageError("recover needs real calibration data: the student learns the teacher's outputs on it",
                             "give --calib (no labels needed), or --no-recover")
        if len(calib) < MIN_SAMPLES:
            raise BadDataError(f"recover needs at least {MIN_SAMPLES} calibration samples to distil on; "
                               f"--calib '{calib.source}' has {len(calib)}",
                               "give more --calib samples (no labels needed), or --no-recover")

    def run(self, model: Intermediate, config: StageConfig, ctx: ChainContext) -> Intermediate:
        assert isinstance(config, RecoverConfig)
        if ctx.record is None:
            ctx.record = StageRecord(self.name, config.model_dump(mode="json"))
        by = model.notes.get("recover", {}).get("by") if isinstance(model.notes.get("recover"), dict) else None
        if not by and model.notes.get("prune", {}).get("auto") and not model.notes["prune"].get("ratio"):
            ctx.record.report.update({"changed": False, "skipped": "--prune auto found no ratio within the bound: "
                                                                    "nothing was pruned"})
            return model
        if by:  # --prune auto recovered each candidate already: the chosen student passes through
            ctx.record.report.update({"changed": False, "done_by": by,
                                      "note": "the prune stage's auto search recovered the chosen student; "
                                              "its figures are in the prune stage's report"})
            return model
        if ctx.calib is None or getattr(ctx.calib, "synthetic", False) or len(ctx.calib) < MIN_SAMPLES:
            self.check_before_work(config, RunFacts(calib=ctx.calib))
            ctx.warn("recover skipped: no --calib data to distil on (the pruned model is kept as it is)")
            ctx.record.report.update({"changed": False, "skipped": "no calibration data"})
            return model
        require_train()
        if ctx.eval is None and _validates_on_calib(ctx):
            ctx.warn("recover trains on --calib, which is also the validation data here (no --eval): the validation's "
                     "accuracy is optimistic; give --eval with samples recovery never sees")
        done = distil_student(model.path, ctx.reference_model, ctx.calib, config, Path(ctx.work_dir),
                              threads=ctx.threads, progress=ctx.progress, search_path=ctx.metric_search_path)
        ctx.record.checks.update(done.checks)
        ctx.record.report.update(done.report)
        if done.stopped == "interrupted":
            ctx.warn(INTERRUPTED)
        if not done.improved:
            ctx.warn("recover: distillation did not improve the held-back metric; the pruned model is kept as it was")
            return model
        notes = {**model.notes, "recover": {"epochs": done.epochs, "held_metric": done.held_metric}}
        return Intermediate(done.path, model.format, model.precision, notes)


@dataclass(frozen=True)
class Distilled:
    """What one distillation made: the exported student (``path``; kept only when ``improved``), why training
    stopped, its report (the stage's figures, the libraries' versions) and its checks (export vs torch)."""

    path: Path
    improved: bool
    epochs: int
    held_metric: float
    stopped: str
    report: dict
    checks: dict


def distil_student(student_model: Path, reference: Path, calib, config: RecoverConfig, work_dir: Path, *,
                   threads: int | None = None, progress=None, search_path: tuple[str, ...] = ()) -> Distilled:
    """Distil ``student_model`` (a pruned ONNX model) from ``reference`` (its FP32 teacher) on ``calib`` with
    ``config`` (its ``budget_s`` covers everything, from importing the models into torch to the export), writing
    into ``work_dir``. The recover stage's work as a plain function: the stage calls it, and so does ``--prune
    auto`` for each candidate, with the planned recover config (``PruneConfig.auto_recover_config``)."""
    from edgeopt.converters import recover_train

    torch, onnx2torch = require_train()
    t0 = time.perf_counter()
    deadline = t0 + config.budget_s
    torch.manual_seed(config.seed)
    if threads:
        torch.set_num_threads(threads)
    student = onnx2torch.convert(str(batchable_copy(student_model, work_dir / "student.batchable.onnx")))
    teacher = onnx2torch.convert(str(batchable_copy(reference, work_dir / "teacher.batchable.onnx")))
    job = recover_train.Job.make(torch, teacher, student, student_model, reference, calib, config, threads,
                                 search_path)
    result = recover_train.distill(torch, job, teacher, student, config, deadline, progress)
    student.load_state_dict(result.best_state)
    out = work_dir / f"{Path(student_model).stem}.recovered.onnx"
    export_student(torch, student, job, student_model, out)
    checks = check_export(torch, student, job, out)
    report = {**result.report(job, time.perf_counter() - t0),
              "versions": {d: version_of(d) for d in ("torch", "torchvision", "onnx2torch")}}
    return Distilled(out, result.improved, result.epochs, result.best_value, result.stopped, report, checks)


def batchable_copy(path: Path, out: Path) -> Path:
    """``path`` with constant Reshape shapes that start with the batch of one (``[1, 200]``) made to copy the
    input's first axis instead (``[0, 200]``, ONNX's own rule), so that torch can train on batches. The copy is
    only used for training: Job.make checks a batch of two against single samples and falls back to one."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    inits = {i.name: i for i in m.graph.initializer}
    changed = 0
    for node in m.graph.node:
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in inits:
            shape = numpy_helper.to_array(inits[node.input[1]])
            allow_zero = any(a.name == "allowzero" and a.i for a in node.attribute)
            if shape.ndim == 1 and len(shape) >= 2 and shape[0] == 1 and not allow_zero:
                new = shape.copy()
                new[0] = 0
                name = f"{node.input[1]}__batchable_{changed}"
                m.graph.initializer.append(numpy_helper.from_array(new, name))
                node.input[1] = name
                changed += 1
    if not changed:
        return path
    with atomic_path(out) as tmp:
        onnx.save(m, str(tmp))
    return out


def _validates_on_calib(ctx: ChainContext) -> bool:
    """Whether the chain's check samples (taken from its validation data) are the calibration set's first ones."""
    check, calib = ctx.check_samples, ctx.calib
    if check is None or not len(check) or len(check) > len(calib):
        return False
    k = len(check)
    return all(n in calib.arrays and np.array_equal(a, calib.arrays[n][:k]) for n, a in check.arrays.items())


def export_student(torch, student, job, source: Path, out: Path) -> None:
    """The student as ONNX with the source model's input/output names and opset (batch of one, like the source)."""
    import onnx

    opset = next((o.version for o in onnx.load(str(source), load_external_data=False).opset_import
                  if o.domain in ("", "ai.onnx")), 17)
    example = tuple(torch.from_numpy(job.x[n][:1]) for n in job.input_names)
    student.eval()
    with atomic_path(out) as tmp, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # dynamo=False is the legacy exporter, on purpose
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shapes traced at a batch of one, as the source
        torch.onnx.export(student, example, str(tmp), input_names=job.input_names, output_names=job.output_names,
                          opset_version=max(13, min(int(opset), 20)), dynamo=False, do_constant_folding=True)


def check_export(torch, student, job, path: Path) -> dict:
    """The exported student run by ONNX Runtime against the torch student on held-back samples: must match."""
    from edgeopt.converters.checks import compare
    from edgeopt.runtime.run_fn import run_fn

    run = run_fn(path)
    feeds = [{n: job.x[n][i : i + 1] for n in job.input_names} for i in job.held_idx[:8]]

    def torch_run(feed):
        with torch.no_grad():
            outs = job.forward(student, {k: torch.from_numpy(v) for k, v in feed.items()})
        return {n: o.numpy() for n, o in zip(job.output_names, outs, strict=True)}

    result = compare(torch_run, run, feeds)
    scale = max(float(np.max(np.abs(v))) for f in feeds[:1] for v in torch_run(f).values()) or 1.0
    if not export_matches(result, scale):
        raise StageError(f"recover: the exported student differs from its torch version (max abs error "
                         f"{result['max_abs_err']:.3g}, cosine {result['cosine_min']:.7f})",
                         "report this model; convert with --no-recover meanwhile")
    return {"export_vs_torch": result}


def export_matches(result: dict, scale: float) -> bool:
    """Whether ONNX Runtime's run of the export is torch's up to float rounding: within EXPORT_TOLERANCE of the
    output's scale, or, for deep nets with large outputs where summation order alone moves single elements by
    more (PP-OCRv4's DBNet: 0.0025 on a 320x320 map), the same direction to EXPORT_MIN_COSINE and within
    EXPORT_LOOSE_TOLERANCE. An export bug (a wrong op, a dropped bias) moves the cosine far more than that."""
    bound = max(1.0, scale)
    if result["max_abs_err"] <= EXPORT_TOLERANCE * bound:
        return True
    cos = result.get("cosine_min")
    return cos is not None and cos >= EXPORT_MIN_COSINE and result["max_abs_err"] <= EXPORT_LOOSE_TOLERANCE * bound
