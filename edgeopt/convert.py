"""``convert``: run a plan's stages on a model and write a validated artifact, atomically.

The stages run in a temporary work directory; the backend writes into ``OUT.tmp-XXXX`` next to
OUT, which becomes OUT (``os.replace``) only once the manifest is written, the artifact validated
and every gate passed. On any failure, a missed gate included, nothing is left at OUT or in the
temporary directory; a gate failure's figures travel in the error (``--json`` prints them).
An existing OUT is refused unless ``force`` (then it is replaced at the end, not before).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer

from edgeopt.artifact import Manifest
from edgeopt.backend_search import AUTO
from edgeopt.enums import Precision
from edgeopt.errors import GateFailedError, StageError
from edgeopt.options import ConvertOptions
from edgeopt.plan import Plan
from edgeopt.validation_model import Validation


class ConvertResult(BaseModel):
    """What ``convert`` made: the :class:`~edgeopt.plan.Plan` it ran and the artifact's
    :class:`~edgeopt.artifact.Manifest` (None for a dry run). ``model_dump(mode="json")`` gives the plan
    as ``Plan.to_json()`` (the ``--json`` form)."""

    model_config = ConfigDict(frozen=True)

    artifact_dir: str | None = None
    manifest: Manifest | None = None
    plan: Plan
    validation: Validation | None = None
    warnings: list[str] = []
    dry_run: bool = False
    metric: list[dict] | None = None  # dry run: each judged output's metric kind and why (edgeopt.metric_choice)

    @field_serializer("plan")
    def _plan_json(self, plan: Plan) -> dict:
        return plan.to_json()


def convert(model, profile, output, options: ConvertOptions | None = None, *, progress=None, on_warning=None,
            plan=None, verifier=None, **keywords) -> ConvertResult:
    """Convert ``model`` for ``profile`` into the artifact directory ``output`` (see the module doc).
    ``options``: a :class:`edgeopt.options.ConvertOptions` (the chain options, the data, the recipe, ``force``,
    ``dry_run``...), or the same fields as keywords (``precision="int8"``; an unknown one is exit 2 with
    "did you mean"). ``metric``: the task metric (a :class:`edgeopt.metrics.MetricSpec`, a name such as
    ``"ctc"`` or ``"pkg.module:function"``, or a mapping); None: the recipe's, else chosen from the output
    and labels. ``plan``: an :class:`edgeopt.plan.Plan` the caller already made for ``profile`` (a cache keyed
    by its hash converts exactly that plan); the chain options are then not used. ``verifier``: what
    ``verify_on`` runs (``edgeopt/convert_on_device.py`` makes it: this module never imports ``remote``, whose
    remote-bench converts through it): ``check()`` before any work, ``verify(artifact_dir, samples, precision,
    threads)`` before the artifact is published."""
    from edgeopt.options import from_keywords

    if options is not None and keywords:
        from edgeopt.errors import UsageError

        raise UsageError(f"convert: give the options as ConvertOptions or as keywords, not both ({', '.join(keywords)})")
    o = options if options is not None else from_keywords(ConvertOptions, keywords, where="convert")
    if o.verify_on and verifier is None:
        from edgeopt.errors import UsageError

        raise UsageError("verify_on needs the device verifier", "call edgeopt.convert (the API) or the CLI")
    from edgeopt.run_tmp import run_temp_dir

    with run_temp_dir():  # the libraries' leftovers (ORT's .ses, TF's autograph files, torch's cache) go with it
        if o.backend == AUTO and plan is None:
            return _convert_fastest(model, profile, output, o, progress=progress, on_warning=on_warning,
                                    verifier=verifier)
        if plan is not None or o.backend is not None or o.recipe is not None or o.dry_run:
            return _convert(model, profile, output, o, progress=progress, on_warning=on_warning, plan=plan,
                            verifier=verifier)
        return _convert_in_order(model, profile, output, o, progress=progress, on_warning=on_warning,
                                 verifier=verifier)


def _convert_fastest(model, profile, output, o: ConvertOptions, **kw) -> ConvertResult:
    """``--backend auto``: every backend of this machine's profile builds it; the fastest that holds is written
    (``edgeopt/backend_search.py``). A dry run plans the first and names the others."""
    from edgeopt.backend_search import check_searchable, convert_fastest

    prof = _profile_of(profile, o)
    backends = check_searchable(prof)
    if o.recipe is not None or o.from_torch is not None:
        from edgeopt.errors import UsageError

        raise UsageError("--backend auto builds an ONNX model with flags only (no --recipe, no --from-torch)",
                         "export the model to ONNX first, or name the backend (--backend NAME)")
    if o.dry_run:
        res = _convert(model, profile, output, o.model_copy(update={"backend": backends[0].value}), plan=None, **kw)
        note = ("--backend auto: builds each of " + ", ".join(b.value for b in backends) + " with these options and "
                "writes the fastest that holds (this plan is the first's)")
        return res.model_copy(update={"warnings": [*res.warnings, note]})
    return convert_fastest(model, prof, output, o,
                           lambda m, out, opts: _convert(m, profile, out, opts, plan=None, speed_check=False, **kw),
                           on_warning=kw.get("on_warning"))


def _convert_in_order(model, profile, output, o: ConvertOptions, **kw) -> ConvertResult:
    """The profile's backends in order: the next when one can't hold the bound (``edgeopt/backend_fallback.py``);
    when INT8 holds on none of them, the best float precision that holds (``edgeopt/float_precisions.py``),
    labelled in the manifest's ``precision`` and ``precision_fallback``. ``--no-fallback``: the first backend only."""
    from edgeopt.backend_fallback import FALLBACK_ON, another_backend_may_hold, backend_order

    order = backend_order(profile, o.profile_dirs) if o.fallback else []
    if not order and not o.fallback:
        return _convert(model, profile, output, o, plan=None, **kw)
    if not order:  # a profile that keeps its first backend unless its converter fails on the model
        from edgeopt.backend_fallback import next_on_crash

        return next_on_crash(lambda b, left: _convert(model, profile, output, o if b is None else o.model_copy(
            update={"backend": b.value}), plan=None, fallback=left, **kw), profile, o.profile_dirs, kw.get("on_warning"))
    try:
        return _try_backends(model, profile, output, o, order, **kw)
    except FALLBACK_ON as err:
        asked = o.precision or _profile_of(profile, o).default_chain.precision
        if Precision(asked) != Precision.INT8 or not another_backend_may_hold(err):
            raise
        return _convert_in_float(model, profile, output, o, order, err, **kw)


def _try_backends(model, profile, output, o: ConvertOptions, order, precision_fallback=None, **kw) -> ConvertResult:
    """``o`` built with each backend of ``order`` (TVM never a fallback) until one holds; the last failure
    otherwise, naming the backends also tried."""
    from edgeopt.backend_fallback import FALLBACK_ON, another_backend_may_hold, fallbacks, left_because

    left: list = []  # BackendLeft
    candidates = [order[0], *fallbacks(order)]
    for i, backend in enumerate(candidates):
        try:
            return _convert(model, profile, output, o.model_copy(update={"backend": backend.value}), plan=None,
                            fallback=tuple(left), precision_fallback=precision_fallback, **kw)
        except FALLBACK_ON as err:
            nxt = (candidates + [None])[i + 1] if another_backend_may_hold(err) else None
            if nxt is None:
                if left:
                    err.message += " (also tried: " + "; ".join(f"{e.backend}: exit {e.exit_code}" for e in left) + ")"
                raise
            left.append(left_because(backend, err))
            if kw.get("on_warning"):
                kw["on_warning"](f"convert: {backend.value} could not hold this model ({err.message}); trying "
                                 f"{nxt.value}, the profile's next backend")
    raise AssertionError("unreachable")


def _convert_in_float(model, profile, output, o: ConvertOptions, order, int8_err, **kw) -> ConvertResult:
    """No INT8 held on any backend: the float precisions the device runs natively, fastest first (FP16 where
    native, FP32 last), each with the same backends in order; the first that holds is written, labelled."""
    from edgeopt.artifact import PrecisionFallback
    from edgeopt.backend_fallback import FALLBACK_ON
    from edgeopt.float_precisions import native_float_precisions

    why = PrecisionFallback(requested=Precision.INT8.value, reason=int8_err.message,
                            exit_code=int(getattr(int8_err, "exit_code", 5)))
    for precision in native_float_precisions(_profile_of(profile, o), order[0]):
        if kw.get("on_warning"):
            kw["on_warning"](f"convert: no INT8 held the bound on this device ({int8_err.message}); trying "
                             f"{precision.value.upper()}, the best float precision it runs natively "
                             "(--no-fallback: exit 5 instead)")
        try:
            return _try_backends(model, profile, output, o.model_copy(update={"precision": precision}), order,
                                 precision_fallback=why, **kw)
        except FALLBACK_ON:
            continue
    raise int8_err


def _profile_of(profile, o: ConvertOptions):
    return _resolve_profile(profile, o, lambda _note: None)[0]


def _convert(model, profile, output, o: ConvertOptions, *, progress, on_warning, plan, verifier=None,
             fallback: tuple = (), precision_fallback=None, speed_check: bool = True) -> ConvertResult:
    """One build: the plan (or the one given), the checks before work, the stages, the manifest, the validation
    and its gates, ``--verify-on``, then the atomic publish."""
    from edgeopt.data import parse_preprocess
    from edgeopt.plan import make_plan

    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning:
            on_warning(message)

    prof, requested = _resolve_profile(profile, o, warn)
    o = _at_batch_one(model, o, warn)
    shapes = dict(o.input_shapes)
    planned = plan is None
    plan = plan or make_plan(prof, o.chain_request(), recipe=o.recipe, input_shapes=shapes)
    fit = None
    if not o.dry_run and model is not None and o.from_torch is None:  # the memory gate, before any work
        from edgeopt.memory.gate import fit_before_work

        o, plan, fit = fit_before_work(
            Path(model), prof, o, plan, shapes, warn,
            lambda new: make_plan(prof, new.chain_request(), recipe=new.recipe, input_shapes=shapes) if planned
            else plan)
    if model is not None and o.from_torch is None and "micro" in plan.options.backend_settings:
        from edgeopt.micro.onnx_ops import check_onnx_for_tflm

        check_onnx_for_tflm(Path(model), prof.name)  # TFLM's op set, before the slow conversion
    for w in plan.warnings:
        warn(w)
    if verifier is not None:  # --verify-on: an unknown device, or an emulated one not started, before any work
        verifier.check()
    if o.dry_run:
        return _dry_run(model, shapes, o, plan, warn, warnings)
    from edgeopt.outputs import check_output, publish

    recipe_path = o.recipe if isinstance(o.recipe, (str, os.PathLike)) else None
    out = check_output(output, force=o.force, inputs=(model, o.calib, o.eval, recipe_path, o.weights))
    if o.from_torch is None and model is None:
        from edgeopt.errors import UsageError

        raise UsageError("no model given", "pass an ONNX file, or --from-torch M:F --weights W")
    pre = parse_preprocess(o.preprocess)

    with tempfile.TemporaryDirectory(prefix="edgeopt-convert-") as work_str:
        work = Path(work_str)
        src, source = _source_model(model, o, shapes, work)
        before = _before_work(src, shapes, o, plan, pre, warn)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{out.name}.tmp-"))
        try:
            manifest = _build_and_check(src, work, tmp, plan, prof, source, before, pre, o, warnings, warn,
                                        progress=progress, verifier=verifier)
            if speed_check and prof.detected:  # the speed-up convert prints, measured on the written artifact
                from edgeopt.speed_claim import check_speed_claim, npz_inputs

                manifest.speed_claim = check_speed_claim(tmp, manifest, src, threads=plan.options.threads,
                                                         inputs=npz_inputs(o), warn=warn)
                manifest.warnings = list(warnings)
            manifest.profile_requested = requested
            manifest.backend_fallback = list(fallback)  # the profile's backends left before this one, and why
            manifest.precision_fallback = precision_fallback  # INT8 held on none: this precision is the best that holds
            if fit is not None:
                from edgeopt.memory.gate import fit_of_artifact

                manifest.memory = fit_of_artifact(Path(model), plan, shapes, fit, manifest.stages)
            from edgeopt.artifact import write_manifest

            manifest = write_manifest(tmp, manifest)
            publish(tmp, out, force=o.force)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return ConvertResult(artifact_dir=str(Path(output)), manifest=manifest, plan=plan,
                         validation=manifest.validation, warnings=warnings)


def _dry_run(model, shapes, o: ConvertOptions, plan, warn, warnings: list[str]) -> ConvertResult:
    """The checks the real run makes before its first stage (a torch source is not exported), and the metric it
    would judge by."""
    from edgeopt.data import parse_preprocess

    metric = None
    if model is not None and o.from_torch is None:
        from edgeopt.metric_choice import metric_choice

        b = _before_work(Path(model), shapes, o, plan, parse_preprocess(o.preprocess), warn)
        metric = metric_choice(model, b[3], plan.options.bound.metric, b[5], plan.options.threads)
    return ConvertResult(plan=plan, warnings=warnings, dry_run=True, metric=metric)


def _resolve_profile(profile, o: ConvertOptions, warn):
    """(the DeviceProfile, the name asked for when a family name or an alias picked it, else None)."""
    from edgeopt.profiles import DeviceProfile, NameKind, resolve_profile

    if isinstance(profile, DeviceProfile):
        return profile, None
    prof, choice = resolve_profile(str(profile), o.profile_dirs or None)  # a family name picks its default member
    if choice.note:
        warn(choice.note)
    return prof, (choice.requested if choice.via != NameKind.NAME else None)


def _at_batch_one(model, o: ConvertOptions, warn) -> ConvertOptions:
    """An ONNX model's inputs whose only dynamic dim is the batch (:func:`edgeopt.model.batch_defaults`) converted
    at batch 1, said once, as if ``--input-shape`` had said so (the plan and its hash record it)."""
    from edgeopt.model import batch_defaults

    if model is None or o.from_torch is not None or not Path(model).is_file():
        return o
    try:
        fixed = batch_defaults(model, o.input_shapes)
    except Exception:  # noqa: BLE001 - an unreadable model is refused, with its reason, by the checks that follow
        return o
    if not fixed:
        return o
    given = " ".join(f"{k}={'x'.join(map(str, v))}" for k, v in fixed.items())
    warn(f"the model's batch dim is dynamic: converted at batch 1 (--input-shape {given}; give another there)")
    return o.model_copy(update={"input_shapes": {**o.input_shapes, **fixed}})


def _source_model(model, o: ConvertOptions, shapes, work: Path) -> tuple[Path, dict[str, Any]]:
    """The ONNX model the chain starts from (exported from torch into ``work`` for ``--from-torch``) and the
    manifest's ``source_model``."""
    from edgeopt.files import file_sha256

    if not o.from_torch:
        src = Path(model)
        return src, {"path": str(src), "sha256": file_sha256(src)}
    from edgeopt.torch_import import export_from_torch

    src = export_from_torch(o.from_torch, o.weights, shapes, work / "from_torch.onnx")
    return src, {"path": str(o.weights or o.from_torch), "from_torch": o.from_torch,
                 "weights": str(o.weights) if o.weights else None,
                 "sha256": file_sha256(o.weights) if o.weights else file_sha256(src)}


def _build_and_check(src, work, tmp, plan, prof, source, before, pre, o, warnings, warn, *, progress, verifier):
    """The stages into ``tmp``, its manifest, the validation against FP32 and its gates (a failure says what a
    pruning stage cost), ``--verify-on``; returns the manifest written in ``tmp``."""
    from edgeopt.artifact import write_manifest
    from edgeopt.chain import check_samples, execute
    from edgeopt.converters.base import ChainContext, Intermediate
    from edgeopt.model import graph_outputs, load_onnx
    from edgeopt.validate import check_gates, validate_artifact

    in_specs, out_specs, calib_ds, val, val_source, search_path = before
    ctx = ChainContext(work_dir=work, artifact_dir=tmp, reference_model=src, calib=calib_ds,
                       eval=val if val_source == "eval" else None, check_samples=check_samples(val),
                       threads=plan.options.threads, metric_search_path=tuple(search_path), warnings=[],
                       progress=progress)
    inter, records = execute(plan, Intermediate(src), ctx, on_warning=warn)
    if ctx.reference_model != src:  # the normalized model: static output shapes
        out_specs = graph_outputs(load_onnx(ctx.reference_model, check=False))
    manifest = write_manifest(tmp, _manifest(plan, prof, source, in_specs, out_specs, inter, records, calib_ds,
                                             pre, warnings, bool(o.from_torch)))
    validation = validate_artifact(tmp, ctx.reference_model, val, data_source=val_source,
                                   manifest=manifest.model_dump(mode="json"), threads=plan.options.threads,
                                   max_accuracy_drop=plan.options.bound.max_accuracy_drop,
                                   min_cosine=plan.options.bound.min_cosine, progress=progress,
                                   metric=plan.options.bound.metric, search_path=search_path,
                                   confidence=plan.options.bound.confidence)
    manifest.validation = validation
    manifest.warnings = list(warnings)
    manifest = write_manifest(tmp, manifest)
    try:
        check_gates(validation)
    except GateFailedError as err:  # the final gate: say what a pruning stage cost
        from edgeopt.converters.prune_blame import blame_pruning

        raise blame_pruning(err, ctx, plan.options, val, search_path=search_path) from err
    manifest.consumer_check = _consumer_check(tmp, manifest, ctx, val, val_source, search_path, plan, prof, warn)
    manifest.warnings = list(warnings)
    if verifier is not None:  # on the device before the rename: a mismatch publishes nothing (exit 5)
        manifest.verified_on = verifier.verify(tmp, ctx.check_samples, plan.precision.value,
                                               threads=plan.options.threads)
        on_device = manifest.verified_on.pop("consumer_check", None)  # load.py run there too
        if on_device and manifest.consumer_check is not None:
            from edgeopt.consumer.model import DeviceLoad

            manifest.consumer_check = manifest.consumer_check.model_copy(update={"on_devices": [DeviceLoad(**on_device)]})
    return manifest


def _consumer_check(tmp, manifest, ctx, val, val_source, search_path, plan, prof, warn):
    """``load.py``/``load.cc`` written beside the model and run through the plain API (exit 5 on a mismatch); where
    OpenVINO's plain default here differs from the judged hint, said on stderr and the artifact judged there too."""
    from edgeopt import __version__
    from edgeopt.consumer import plain_default as pd
    from edgeopt.consumer.check import check_as_deployed
    from edgeopt.validate import validate_artifact

    as_json = manifest.model_dump(mode="json")
    record = check_as_deployed(tmp, as_json, ctx.check_samples, version=__version__)
    differs = pd.differing_default(record, as_json)
    if differs is None:
        if pd.unjudged_bf16_target(record, as_json, prof):
            warn(pd.unjudged_line(prof.name))
        return record
    warn(pd.loud_line(*differs, as_json["runtime"]["model"]))
    bound = plan.options.bound.max_accuracy_drop
    judged = pd.judge_at_default(as_json, differs[1], lambda m: validate_artifact(
        tmp, ctx.reference_model, val, data_source=val_source, manifest=m, threads=plan.options.threads,
        max_accuracy_drop=bound, metric=plan.options.bound.metric, search_path=search_path), bound)
    return record.model_copy(update={"plain_default": judged})


def _before_work(src: Path, shapes, o: ConvertOptions, plan, pre, warn):
    """What the run checks before its first stage (``--dry-run`` too): the model at the run's shapes (dynamic
    dims without ``--input-shape`` refused), the data loaded and checked, the flags against the plan and the
    model (:mod:`edgeopt.applicability`), the labels and a user's metric against FP32's outputs. Returns
    (input specs, output specs, calibration set, validation set, its source, the metric's search path)."""
    from edgeopt.applicability import check_before_work
    from edgeopt.chain import load_datasets
    from edgeopt.converters.base import RunFacts
    from edgeopt.model import fix_input_shapes, graph_inputs, graph_outputs, load_onnx
    from edgeopt.validate import check_task_metric

    proto = fix_input_shapes(load_onnx(src), shapes, origin=src.name)
    in_specs, out_specs = graph_inputs(proto), graph_outputs(proto)
    del proto
    calib_ds, val, val_source = load_datasets(in_specs, o.calib, o.eval, pre, plan.precision, warn)
    search_path = list(o.metric_dirs())
    for note in dict.fromkeys([*(calib_ds.notes if calib_ds is not None else []), *val.notes]):
        warn(note)
    check_before_work(plan, RunFacts(tuple(in_specs), tuple(out_specs), calib_ds))
    check_task_metric(src, shapes, val, val_source, plan.options.bound.metric, search_path, plan.options.threads)
    return in_specs, out_specs, calib_ds, val, val_source, search_path


def _manifest(plan, prof, source, in_specs, out_specs, inter, records, calib_ds, pre, warnings, with_torch):
    from edgeopt.artifact import Calibration, build_manifest, tensor_infos

    runtime = inter.notes.get("runtime")
    if not runtime:
        raise StageError(f"backend '{plan.backend.value}' returned no runtime entry", "a bug in the backend: report it")
    quantized = plan.precision == Precision.INT8
    used = len(calib_ds) if quantized and calib_ds is not None else 0
    for r in records:  # a stage that calibrated on fewer samples says how many in its report
        reported = r.report.get("calibration") if isinstance(r.report.get("calibration"), dict) else {}
        if isinstance(reported.get("samples"), int):
            used = min(used, reported["samples"]) if used else reported["samples"]
    calibration = Calibration(source=calib_ds.source if quantized and calib_ds is not None else None,
                              samples=used, synthetic=bool(quantized and calib_ds is not None and calib_ds.synthetic))
    return build_manifest(
        backend=plan.backend.value, precision=plan.precision.value, profile=prof.name, source=source,
        inputs=tensor_infos(in_specs, pre.model_dump(mode="json") if pre else None), outputs=tensor_infos(out_specs),
        runtime=runtime, stages=[{"name": r.name, "config": r.config, "seconds": r.seconds, "checks": r.checks,
                                  "report": r.report} for r in records],
        with_torch=with_torch, calibration=calibration, plan_hash=plan.hash, plan=plan.to_json(), warnings=warnings,
    )
