"""The one chain executor: a plan's stages run in order on an intermediate model, each timed, recorded and
its warnings passed on. ``convert`` runs them all and writes the artifact; ``tune`` stops before the backend
(``stop_before``) to tune what the backend would compile.
"""

from __future__ import annotations

import time

from edgeopt.enums import Precision
from edgeopt.errors import EdgeoptError, GateFailedError, StageError, is_edgeopt_bug

HOLDOUT_FRACTION = 0.2  # of --calib, kept from calibration for validation when there is no --eval
HOLDOUT_MAX = 256
SYNTHETIC_CALIB = 32
SYNTHETIC_VALIDATION = 16
CHECK_SAMPLES = 8  # samples each stage checks its output on against its input


def stage_class(name: str, plan):
    from edgeopt.backend_choice import backend_class
    from edgeopt.converters.registry import get_stage

    return backend_class(plan.backend) if name == plan.backend.value else get_stage(name)


def run_stage(stage, spec, inter, ctx):
    try:
        return stage.run(inter, spec.config, ctx)
    except EdgeoptError:
        raise
    except Exception as err:  # noqa: BLE001 - a library failing on the model becomes one line naming it
        if is_edgeopt_bug(err):
            raise  # a bug of ours is exit 1 with its traceback under --debug, not "bad input"
        from edgeopt.outputs import environment_fault

        if (env := environment_fault(err)) is not None:  # a full disk or read-only path, not the model
            raise env from err
        text = str(err).strip().splitlines()
        first = text[0][:240] if text else ""
        raise StageError(f"stage '{spec.name}' failed: {type(err).__name__}: {first}", stage_hint(spec.name)) from err


def stage_hint(stage: str) -> str:
    """What to try when a library fails inside ``stage``: another --backend/--precision helps only where the
    backend or the quantizer failed; a model that can't even be normalized needs looking at."""
    if stage in ("normalize", "prune"):
        return ("the model itself could not be processed (a custom-domain or unsupported operator?): see "
                "edgeopt analyze MODEL; --debug shows the traceback")
    if stage == "qdq":
        return "try --precision fp32 or another --calib-method; --debug shows the traceback"
    return "try another --backend or --precision; --debug shows the traceback"


def load_datasets(specs, calib, eval, preprocess, precision: Precision, warn):
    """(calibration set, validation set, validation source label) from the user's data."""
    from edgeopt.data import load_data, synthetic_dataset

    calib_ds = load_data(calib, specs, preprocess=preprocess, role="calib") if calib else None
    eval_ds = load_data(eval, specs, preprocess=preprocess, role="eval") if eval else None
    quantizing = precision == Precision.INT8
    if eval_ds is not None:
        val, source = eval_ds, "eval"
    elif calib_ds is not None and not quantizing:
        val, source = calib_ds, "calib"  # nothing is calibrated: the whole set is unseen
    elif calib_ds is not None and len(calib_ds) >= 2:
        k = min(HOLDOUT_MAX, max(1, round(len(calib_ds) * HOLDOUT_FRACTION)))
        val, calib_ds = calib_ds.split(k / len(calib_ds), seed=0)
        source = "calib-holdout"
    else:
        val, source = synthetic_dataset(specs, SYNTHETIC_VALIDATION, seed=1), "synthetic"
        warn("validation uses synthetic random inputs (no --eval/--calib): its figures show fidelity to FP32, not accuracy")
    if quantizing and calib_ds is None:
        calib_ds = synthetic_dataset(specs, SYNTHETIC_CALIB, seed=0)
        warn("NO CALIBRATION DATA: INT8 scales come from SYNTHETIC random inputs; accuracy on real data may be poor. "
             "Give --calib with real samples")
    return calib_ds, val, source


def check_samples(dataset):
    """The first few samples of ``dataset``: what each stage checks its output on."""
    return dataset.subset(list(range(min(CHECK_SAMPLES, len(dataset)))))


def execute(plan, inter, ctx, *, stop_before: str | None = None, on_warning=None):
    """Run ``plan``'s stages on ``inter`` (an Intermediate) in order, up to the stage named ``stop_before``
    (not run). Returns (the last intermediate, the stage records). After ``normalize`` its output becomes
    the reference every later stage is checked against."""
    from edgeopt.converters.base import StageRecord

    records = []
    for spec in plan.stages:
        if spec.name == stop_before:
            break
        stage = stage_class(spec.name, plan)()
        ctx.record = StageRecord(spec.name, spec.config.model_dump(mode="json"))
        n_warn = len(ctx.warnings)
        t0 = time.perf_counter()
        try:
            if inter.notes.get("cascade") and spec.name == plan.backend.value:  # early exits: one model per stage
                from edgeopt.converters.early_exit.staged import run_staged

                inter = run_staged(stage, spec, inter, ctx, run_stage)
            else:
                inter = run_stage(stage, spec, inter, ctx)
        except GateFailedError as err:  # a search's gate: say what a pruning stage before it cost
            from edgeopt.converters.prune_blame import blame_pruning

            raise blame_pruning(err, ctx, plan.options, ctx.eval if ctx.eval is not None else ctx.check_samples) \
                from err
        ctx.record.seconds = round(time.perf_counter() - t0, 3)
        for w in ctx.warnings[n_warn:]:
            if on_warning:
                on_warning(w)
        records.append(ctx.record)
        if spec.name == "normalize":
            ctx.reference_model = inter.path
        elif spec.name in ("prune", "recover") and inter.path != ctx.reference_model:
            ctx.pruned_model = inter.path  # the pruned FP32 model: what a gate failure measures pruning by
    return inter, records
