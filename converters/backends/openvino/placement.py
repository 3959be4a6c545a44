"""Placement of an OpenVINO IR's ops: ``core.query_model(model, device)`` where the device is on this machine,
else predicted for the NPU (it compiles whole graphs for static shapes: an op with a dynamic output shape is
predicted off it), marked ``"predicted"``."""

from __future__ import annotations

from pathlib import Path

from edgeopt.placement import build_report, op_support

SKIP = ("Parameter", "Result", "Constant")


def _rows(model, where: dict[str, str], device: str, predicted: bool) -> list[dict]:
    rows, out_name = [], {}
    for op in model.get_ordered_ops():
        if op.get_type_name() in SKIP:
            for o in op.outputs():
                out_name[(op.get_friendly_name(), o.get_index())] = f"{op.get_friendly_name()}:{o.get_index()}"
            continue
        name = op.get_friendly_name()
        if predicted:
            dynamic = any(o.get_partial_shape().is_dynamic for o in op.outputs())
            engine, why = ("CPU", "dynamic shape: the NPU compiles static shapes only") if dynamic else (device, None)
        else:
            engine = where.get(name, "none")
            why = None if engine == device else f"query_model put it on {engine}"
        ins = [f"{i.get_source_output().get_node().get_friendly_name()}:{i.get_source_output().get_index()}"
               for i in op.inputs()]
        outs = [f"{name}:{o.get_index()}" for o in op.outputs()]
        rows.append({"name": name, "op_type": op.get_type_name(), "engine": engine, "why": why,
                     "inputs": ins, "outputs": outs})
    return rows


def _sizes(model) -> dict[str, int]:
    out = {}
    for op in model.get_ordered_ops():
        for o in op.outputs():
            shape = o.get_partial_shape()
            n = o.get_element_type().size
            for d in shape:
                n *= d.get_length() if d.is_static else 1
            out[f"{op.get_friendly_name()}:{o.get_index()}"] = n
    return out


def ov_placement(model_path: str | Path, device: str, *, target_unit: str, bandwidth_gbps: float | None) -> dict:
    """The placement report of the IR at ``model_path`` for OpenVINO ``device``."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(model_path))
    if device in core.available_devices:
        where = dict(core.query_model(model, device))
        rows = _rows(model, where, device, predicted=False)
        source, how = "runtime", f"OpenVINO core.query_model(model, '{device}')"
    else:
        rows = _rows(model, {}, device, predicted=True)
        source = "predicted"
        how = (f"{device} is not on this machine (OpenVINO sees {', '.join(core.available_devices)}): predicted; "
               f"{op_support()['openvino_npu']['note']}")
    for r in rows:
        r["unit"] = "cpu" if r["engine"] in ("CPU", "none") else target_unit
    return build_report(rows, target_unit=target_unit, target=device, source=source, how=how,
                        sizes=_sizes(model), bandwidth_gbps=bandwidth_gbps)
