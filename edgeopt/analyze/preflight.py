"""Pre-flight: what each backend the profile lists would refuse, asked of the backend itself.

* ONNX Runtime: the model loads in an ``InferenceSession`` (CPU execution provider).
* OpenVINO: ``Core().read_model`` (its ONNX frontend) then ``Core().query_model`` for the device,
  where the device exists here; otherwise "not checkable here".
* TVM: the op types the Relax ONNX importer converts (``onnx_frontend._get_convert_map()``).
* TFLite: the op types onnx2tf converts (one module per op in ``onnx2tf/ops``; read without importing
  onnx2tf, which would import TensorFlow).
Each backend is optional: one not installed is reported as such and skipped.
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path

from edgeopt.analyze.result import PreflightIssue, PreflightKind, Severity
from edgeopt.enums import BackendName
from edgeopt.errors import MissingDependencyError
from edgeopt.profiles import BackendTarget, DeviceProfile


def _first_line(err: BaseException, limit: int = 240) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:limit]


def _nodes(graph):
    """Every node of ``graph`` and of its subgraphs (If/Loop/Scan bodies)."""
    for n in graph.node:
        yield n
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _nodes(g)


def _op_types(model) -> list[str]:
    return sorted({n.op_type for n in _nodes(model.graph)})


def _ok(target: BackendTarget, how: str) -> PreflightIssue:
    return PreflightIssue(backend=target.name, unit=target.unit, severity=Severity.INFO, kind=PreflightKind.OK,
                          message=f"{target.name.value}: {how}")


def _unsupported(target: BackendTarget, ops: list[str], how: str) -> PreflightIssue:
    return PreflightIssue(
        backend=target.name, unit=target.unit, severity=Severity.ERROR, kind=PreflightKind.UNSUPPORTED_OP,
        message=f"{target.name.value}: {len(ops)} op type(s) not supported ({how}): {', '.join(ops)}", ops=ops,
    )


def check_onnxruntime(model, target: BackendTarget) -> list[PreflightIssue]:
    from edgeopt.deps import require

    ort = require("onnxruntime", "pre-flight")
    out = []
    provider = str(target.settings.get("provider", "CPUExecutionProvider"))
    if provider not in ort.get_available_providers():
        out.append(PreflightIssue(
            backend=target.name, unit=target.unit, severity=Severity.INFO, kind=PreflightKind.NOT_CHECKABLE,
            message=f"onnxruntime: {provider} is not available here; checked with CPUExecutionProvider only",
        ))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 - the backend's own refusal is the finding
        out.append(PreflightIssue(
            backend=target.name, unit=target.unit, severity=Severity.ERROR, kind=PreflightKind.LOAD_FAILED,
            message=f"onnxruntime: the model does not load: {_first_line(err)}",
        ))
    else:
        out.append(_ok(target, "loads in an InferenceSession (CPUExecutionProvider)"))
    return out


def check_openvino(model, target: BackendTarget) -> list[PreflightIssue]:
    from edgeopt.deps import require

    ov = require("openvino", "pre-flight")
    device = str(target.settings.get("device", target.unit.value.upper()))
    core = ov.Core()
    with tempfile.TemporaryDirectory(prefix="edgeopt-preflight-") as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(model.SerializeToString())
        try:
            ov_model = core.read_model(str(path))
        except Exception as err:  # noqa: BLE001 - the ONNX frontend names the ops it cannot convert
            return [PreflightIssue(
                backend=target.name, unit=target.unit, severity=Severity.ERROR, kind=PreflightKind.LOAD_FAILED,
                message=f"openvino: the ONNX frontend cannot read the model: {_first_line(err)}",
            )]
    if device.split(".")[0] not in core.available_devices:
        return [PreflightIssue(
            backend=target.name, unit=target.unit, severity=Severity.INFO, kind=PreflightKind.NOT_CHECKABLE,
            message=f"openvino: read_model succeeded; device {device} is not present here "
                    f"(available: {', '.join(core.available_devices)}), so its op support is not checkable here",
        )]
    supported = core.query_model(ov_model, device)
    missing = sorted({op.get_type_name() for op in ov_model.get_ops()
                      if op.get_friendly_name() not in supported
                      and op.get_type_name() not in ("Parameter", "Result", "Constant")})
    if missing:
        return [_unsupported(target, missing, f"Core.query_model on {device}; OpenVINO op types")]
    return [_ok(target, f"every op is supported on {device} (Core.query_model)")]


def check_tvm(model, target: BackendTarget) -> list[PreflightIssue]:
    from edgeopt.deps import require

    frontend = require("tvm.relax.frontend.onnx.onnx_frontend", "pre-flight")
    convert_map = frontend._get_convert_map()
    missing = [op for op in _op_types(model) if op not in convert_map]
    if missing:
        return [_unsupported(target, missing, "not in the Relax ONNX importer's convert map")]
    return [_ok(target, f"the Relax ONNX importer converts all {len(_op_types(model))} op types")]


def onnx2tf_ops() -> set[str] | None:
    spec = importlib.util.find_spec("onnx2tf")
    if spec is None or not spec.submodule_search_locations:
        return None
    ops_dir = Path(list(spec.submodule_search_locations)[0]) / "ops"
    return {p.stem for p in ops_dir.glob("*.py") if p.stem[:1].isupper()}


def check_tflite(model, target: BackendTarget) -> list[PreflightIssue]:
    ops = onnx2tf_ops()
    if ops is None:
        raise MissingDependencyError("onnx2tf is not installed", "install it with: pip install 'edgeopt[tflite]'")
    missing = [op for op in _op_types(model) if op not in ops]
    if missing:
        return [_unsupported(target, missing, "onnx2tf has no converter for them")]
    return [_ok(target, f"onnx2tf converts all {len(_op_types(model))} op types")]


def check_for(backend: BackendName) -> Callable:
    """The backend's own op check, named by its class (``preflight_check``)."""
    from edgeopt.converters.registry import get_backend, resolve

    ref = get_backend(backend).preflight_check
    return resolve(ref) if ref else (lambda model, target: [])


def static_shape_issues(original, unknown: list[str], profile: DeviceProfile) -> list[PreflightIssue]:
    from edgeopt.model import graph_inputs

    out = []
    dynamic = [s for s in graph_inputs(original) if not s.is_static]
    if dynamic and profile.requires_static_shapes:
        names = ", ".join(f"{s.name}{list(s.shape)}" for s in dynamic)
        out.append(PreflightIssue(
            severity=Severity.WARNING, kind=PreflightKind.DYNAMIC_SHAPE,
            message=f"{profile.name} needs static shapes and the model's inputs are dynamic ({names}): "
                    "convert with --input-shape (fixed for this analysis)",
        ))
    if unknown:
        sev = Severity.ERROR if profile.requires_static_shapes else Severity.WARNING
        out.append(PreflightIssue(
            severity=sev, kind=PreflightKind.DYNAMIC_SHAPE,
            message=f"{len(unknown)} intermediate tensor(s) have data-dependent shapes (e.g. '{unknown[0]}')"
                    + (f"; {profile.name} needs static shapes" if profile.requires_static_shapes else ""),
        ))
    return out


def weight_issues(model) -> list[PreflightIssue]:
    """The normalize stage's weight check, said ahead: broken weights are an error; ±inf constants that
    are masks or the identity of a Max (legitimate, e.g. in JAX exports) are noted."""
    from edgeopt.converters.normalize import check_finite_weights
    from edgeopt.errors import BadModelError

    try:
        accepted = check_finite_weights(model, "model")
    except BadModelError as err:
        return [PreflightIssue(severity=Severity.ERROR, kind=PreflightKind.WEIGHTS, message=err.message)]
    if not accepted:
        return []
    names = ", ".join(f"'{n}'" for n in accepted[:3]) + ("…" if len(accepted) > 3 else "")
    return [PreflightIssue(severity=Severity.INFO, kind=PreflightKind.WEIGHTS,
                           message=f"{len(accepted)} ±inf constant(s) outside any weight ({names}): masks or the "
                                   "identity of a Max/Min, which convert accepts")]


def run_preflight(model, original, profile: DeviceProfile, unknown: list[str]) -> list[PreflightIssue]:
    """Issues for ``model`` (static shapes fixed) on every backend of ``profile``, plus shape and weight issues."""
    out = static_shape_issues(original, unknown, profile) + weight_issues(original)
    seen = set()
    for target in profile.backends:
        key = (target.name, target.unit, str(target.settings.get("device", "")))
        if key in seen:
            continue
        seen.add(key)
        try:
            out.extend(check_for(target.name)(model, target))
        except MissingDependencyError as err:
            out.append(PreflightIssue(
                backend=target.name, unit=target.unit, severity=Severity.INFO, kind=PreflightKind.NOT_INSTALLED,
                message=f"{target.name.value}: not checked: {err.one_line()}",
            ))
        except Exception as err:  # noqa: BLE001 - a checker that breaks must not hide the others
            out.append(PreflightIssue(
                backend=target.name, unit=target.unit, severity=Severity.WARNING, kind=PreflightKind.NOT_CHECKABLE,
                message=f"{target.name.value}: the check itself failed: {type(err).__name__}: {_first_line(err)}",
            ))
    return out
