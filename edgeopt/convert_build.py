"""One build inside ``convert``: the source model (exported from torch when asked), the checks before the first
stage, the stages into the temporary artifact, its manifest, the validation against FP32 and its gates (a failure
says what a pruning stage cost), the ``load.py`` check and ``--verify-on``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.enums import Precision
from edgeopt.errors import GateFailedError, StageError
from edgeopt.options import ConvertOptions


def source_model(model, o: ConvertOptions, shapes, work: Path) -> tuple[Path, dict[str, Any]]:
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


def before_work(src: Path, shapes, o: ConvertOptions, plan, pre, warn):
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


def build_and_check(src, work, tmp, plan, prof, source, before, pre, o, warnings, warn, *, progress, verifier,
                    looks=None):
    """The stages into ``tmp``, its manifest, the validation against FP32 and its gates (a failure says what a
    pruning stage cost), ``--verify-on``; returns the manifest written in ``tmp`` and the FP32 model it was judged
    against (the normalized source model, in ``work``)."""
    from edgeopt.artifact import write_manifest
    from edgeopt.chain import check_samples, execute
    from edgeopt.converters.base import ChainContext, Intermediate
    from edgeopt.model import graph_outputs, load_onnx
    from edgeopt.validate import check_gates, validate_artifact

    in_specs, out_specs, calib_ds, val, val_source, search_path = before
    ctx = ChainContext(work_dir=work, artifact_dir=tmp, reference_model=src, calib=calib_ds,
                       eval=val if val_source == "eval" else None, check_samples=check_samples(val),
                       threads=plan.options.threads, metric_search_path=tuple(search_path), warnings=[],
                       progress=progress, **({} if looks is None else {"held_back_looks": looks}))
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
        from edgeopt.manifest_types import VerifiedOn

        verified = verifier.verify(tmp, ctx.check_samples, plan.precision.value, threads=plan.options.threads)
        on_device = verified.pop("consumer_check", None)  # load.py run there too
        manifest.verified_on = VerifiedOn.model_validate(verified)
        if on_device and manifest.consumer_check is not None:
            from edgeopt.consumer.model import DeviceLoad

            manifest.consumer_check = manifest.consumer_check.model_copy(update={"on_devices": [DeviceLoad(**on_device)]})
    return manifest, ctx.reference_model


def _consumer_check(tmp, manifest, ctx, val, val_source, search_path, plan, prof, warn):
    """``load.py``/``load.cc`` written beside the model and run through the plain API (exit 5 on a mismatch); where
    the runtime's plain default here differs from the judged setting, said on stderr and the artifact judged there
    too."""
    from edgeopt import __version__
    from edgeopt.consumer import plain_default as pd
    from edgeopt.consumer.check import check_as_deployed
    from edgeopt.validate import validate_artifact

    as_json = manifest.model_dump(mode="json")
    record = check_as_deployed(tmp, as_json, ctx.check_samples, version=__version__)
    found = pd.plain_default(record, as_json, prof)
    if found is not None:
        warn(found.line)
    if found is None or found.ran is None:  # nothing to say, or a default this machine does not run
        return record
    bound = plan.options.bound.max_accuracy_drop
    judged = pd.judge_at_default(as_json, found, lambda m: validate_artifact(
        tmp, ctx.reference_model, val, data_source=val_source, manifest=m, threads=plan.options.threads,
        max_accuracy_drop=bound, metric=plan.options.bound.metric, search_path=search_path), bound)
    return record.model_copy(update={"plain_default": judged})


def _manifest(plan, prof, source, in_specs, out_specs, inter, records, calib_ds, pre, warnings, with_torch):
    from edgeopt.artifact import Calibration, build_manifest, tensor_infos
    from edgeopt.manifest_types import PlanEntry, RuntimeEntry, StageEntry

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
        inputs=tensor_infos(in_specs, pre), outputs=tensor_infos(out_specs),
        runtime=RuntimeEntry.model_validate(runtime),
        stages=[StageEntry(name=r.name, config=r.config, seconds=r.seconds, checks=r.checks, report=r.report)
                for r in records],
        with_torch=with_torch, calibration=calibration, plan_hash=plan.hash, plan=PlanEntry.model_validate(plan.to_json()),
        warnings=warnings,
    )
