"""``convert``: run a plan's stages on a model and write a validated artifact, atomically.

The stages run in a temporary work directory; the backend writes into ``OUT.tmp-XXXX`` next to
OUT, which becomes OUT (``os.replace``) only once the manifest is written, the artifact validated
and every gate passed. On any failure, a missed gate included, nothing is left at OUT or in the
temporary directory; a gate failure's figures travel in the error (``--json`` prints them).
An existing OUT is refused unless ``force`` (then it is replaced at the end, not before).
This module chooses the backends and precisions to try and publishes; one build's work is in
:mod:`edgeopt.convert_build`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_serializer

from edgeopt.artifact import Manifest
from edgeopt.backend_search import AUTO
from edgeopt.convert_build import before_work, build_and_check, source_model
from edgeopt.enums import Precision
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
    from edgeopt.metrics.confidence import Looks
    from edgeopt.run_tmp import run_temp_dir

    looks = Looks()  # every backend tried looks at the same held-back part of --eval: one count for the run
    with run_temp_dir():  # the libraries' leftovers (ORT's .ses, TF's autograph files, torch's cache) go with it
        if o.backend == AUTO and plan is None:
            return _convert_fastest(model, profile, output, o, progress=progress, on_warning=on_warning,
                                    verifier=verifier, looks=looks)
        if plan is not None or o.backend is not None or o.recipe is not None or o.dry_run:
            return _convert(model, profile, output, o, progress=progress, on_warning=on_warning, plan=plan,
                            verifier=verifier, looks=looks)
        return _convert_in_order(model, profile, output, o, progress=progress, on_warning=on_warning,
                                 verifier=verifier, looks=looks)


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
        from edgeopt.memory.gate import least_refusal

        asked = o.precision or _profile_of(profile, o).default_chain.precision
        if Precision(asked) != Precision.INT8 or not another_backend_may_hold(err) or least_refusal([(None, err)]):
            raise  # a float build never needs less memory than the INT8 one the gate refused
        return _convert_in_float(model, profile, output, o, order, err, **kw)


def _try_backends(model, profile, output, o: ConvertOptions, order, precision_fallback=None, **kw) -> ConvertResult:
    """``o`` built with each backend of ``order`` (TVM never a fallback) until one holds; the last failure
    otherwise, naming the backends also tried."""
    from edgeopt.backend_fallback import FALLBACK_ON, another_backend_may_hold, fallbacks, left_because

    left: list = []  # BackendLeft
    failures: list = []  # (backend, error)
    candidates = [order[0], *fallbacks(order)]
    for i, backend in enumerate(candidates):
        try:
            return _convert(model, profile, output, o.model_copy(update={"backend": backend.value}), plan=None,
                            fallback=tuple(left), precision_fallback=precision_fallback, **kw)
        except FALLBACK_ON as err:
            nxt = (candidates + [None])[i + 1] if another_backend_may_hold(err) else None
            failures.append((backend, err))
            if nxt is None:
                from edgeopt.memory.gate import least_refusal

                shown, err = least_refusal(failures) or (backend, err)  # memory: the backend that needs the least
                others = [f for f in failures if f[0] != shown]
                if others:
                    err.message += " (also tried: " + "; ".join(f"{b.value}: exit {e.exit_code}" for b, e in others) + ")"
                raise err
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
             fallback: tuple = (), precision_fallback=None, speed_check: bool = True, looks=None) -> ConvertResult:
    """One build: the plan (or the one given), the checks before work, the stages, the manifest, the validation
    and its gates, ``--verify-on``, then the atomic publish. ``looks``: the run's ``metrics.confidence.Looks``."""
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
    plan = plan or make_plan(prof, o, recipe=o.recipe, input_shapes=shapes)
    fit = None
    if not o.dry_run and model is not None and o.from_torch is None:  # the memory gate, before any work
        from edgeopt.memory.gate import fit_before_work

        o, plan, fit = fit_before_work(
            Path(model), prof, o, plan, shapes, warn,
            lambda new: make_plan(prof, new, recipe=new.recipe, input_shapes=shapes) if planned
            else plan)
    if model is not None and o.from_torch is None:  # what the backend's target can't take, before any work
        from edgeopt.converters.registry import hooks_of

        hooks_of(plan.options.backend).check_source(Path(model), plan.options.backend_settings, prof.name)
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
        src, source = source_model(model, o, shapes, work)
        before = before_work(src, shapes, o, plan, pre, warn)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{out.name}.tmp-"))
        try:
            manifest, judged = build_and_check(src, work, tmp, plan, prof, source, before, pre, o, warnings, warn,
                                        progress=progress, verifier=verifier, looks=looks)
            if speed_check and prof.detected:  # the speed-up convert prints, measured on the written artifact
                from edgeopt.speed_claim import check_speed_claim, npz_inputs

                manifest.speed_claim = check_speed_claim(tmp, manifest, src, threads=plan.options.threads,
                                                         inputs=npz_inputs(o), warn=warn, judged=judged)
                manifest.warnings = list(warnings)
            manifest.profile_requested = requested
            manifest.backend_fallback = list(fallback)  # the profile's backends left before this one, and why
            manifest.precision_fallback = precision_fallback  # INT8 held on none: this precision is the best that holds
            if fit is not None:
                from edgeopt.memory.gate import fit_of_artifact

                manifest.memory = fit_of_artifact(Path(model), plan, shapes, fit, manifest.stages, artifact_dir=tmp,
                                                  threads=plan.options.threads)
                _warn_measured_over(manifest.memory, warn)
            from edgeopt.artifact import write_manifest

            manifest = write_manifest(tmp, manifest)
            publish(tmp, out, force=o.force)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return ConvertResult(artifact_dir=str(Path(output)), manifest=manifest, plan=plan,
                         validation=manifest.validation, warnings=warnings)


def _warn_measured_over(fit, warn) -> None:
    peak = (fit.measured or {}).get("peak_bytes")
    if peak is not None and peak > fit.budget_bytes:
        from edgeopt.memory.predict import size_text

        warn(f"memory: measured peak {size_text(peak)} on this host is over the budget {size_text(fit.budget_bytes)} "
             f"({fit.budget_source}), though the prediction ({size_text(fit.predicted.total_bytes)}) fits")


def _dry_run(model, shapes, o: ConvertOptions, plan, warn, warnings: list[str]) -> ConvertResult:
    """The checks the real run makes before its first stage (a torch source is not exported), and the metric it
    would judge by."""
    from edgeopt.data import parse_preprocess

    metric = None
    if model is not None and o.from_torch is None:
        from edgeopt.metric_choice import metric_choice

        b = before_work(Path(model), shapes, o, plan, parse_preprocess(o.preprocess), warn)
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
