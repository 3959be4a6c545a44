"""OpenVINO's pre-flight: ``Core().read_model`` (its ONNX frontend) then ``Core().query_model`` for the
device, where the device exists here; otherwise "not checkable here"."""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.analyze.preflight import first_line, ok, unsupported
from edgeopt.analyze.result import PreflightIssue, PreflightKind, Severity
from edgeopt.profiles import BackendTarget


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
                message=f"openvino: the ONNX frontend cannot read the model: {first_line(err)}",
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
        return [unsupported(target, missing, f"Core.query_model on {device}; OpenVINO op types")]
    return [ok(target, f"every op is supported on {device} (Core.query_model)")]
