"""ONNX Runtime's pre-flight: the model loads in an ``InferenceSession`` (CPU execution provider)."""

from __future__ import annotations

from edgeopt.analyze.preflight import first_line, ok
from edgeopt.analyze.result import PreflightIssue, PreflightKind, Severity
from edgeopt.profiles import BackendTarget


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
            message=f"onnxruntime: the model does not load: {first_line(err)}",
        ))
    else:
        out.append(ok(target, "loads in an InferenceSession (CPUExecutionProvider)"))
    return out
