"""Where each op runs: op → unit (gpu, npu, cpu) for an artifact or a model on a profile with an accelerator.

The placement comes from the runtime where it is here (ONNX Runtime's node assignment, OpenVINO's
``query_model``), else it is predicted from the runtime's published op support (``op_support.json``, its sources
named) and the rules measured on real runtimes (an int32 DequantizeLinear runs on the CPU under CUDA), and marked
``"predicted"``. From it: the ops that leave the accelerator (fallback ops), the CPU islands (connected runs of
them), the copies between units and the bytes crossing each boundary (from the tensors' shapes), and the copies'
cost estimated from the profile's memory bandwidth (each byte read and written once).
"""

from __future__ import annotations

import json
from importlib import resources

from edgeopt.errors import GateFailedError

ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}  # onnx elem type → bytes


def op_support() -> dict:
    """The published op-support tables (``op_support.json``)."""
    return json.loads(resources.files("edgeopt.placement").joinpath("op_support.json").read_text())


def tensor_bytes(model) -> dict[str, int]:
    """Each tensor's size in bytes from its inferred shape (a symbolic dimension counts as 1: batch 1)."""
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model shape inference can't read: sizes unknown (0)
        pass
    out = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        t = vi.type.tensor_type
        n = ITEMSIZE.get(t.elem_type, 4)
        for d in t.shape.dim:
            n *= d.dim_value if d.dim_value > 0 else 1
        out[vi.name] = n if t.HasField("shape") else 0
    return out


def _islands(nodes: list[dict], consumers: dict[str, list[int]], unit: str) -> int:
    """Connected runs of ``unit``'s nodes (linked through the tensors between them)."""
    idx = [i for i, n in enumerate(nodes) if n["unit"] == unit]
    parent = {i: i for i in idx}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in idx:
        for out in nodes[i]["outputs"]:
            for j in consumers.get(out, ()):
                if j in parent:
                    parent[find(i)] = find(j)
    return len({find(i) for i in idx})


def build_report(nodes: list[dict], *, target_unit: str, target: str, source: str, how: str,
                 sizes: dict[str, int], bandwidth_gbps: float | None) -> dict:
    """The placement report from ``nodes`` (graph order; each ``name``, ``op_type``, ``unit``, ``engine``,
    ``inputs``, ``outputs``, and ``why`` where it leaves the target)."""
    producer = {o: i for i, n in enumerate(nodes) for o in n["outputs"]}
    consumers: dict[str, list[int]] = {}
    for j, n in enumerate(nodes):
        for x in n["inputs"]:
            consumers.setdefault(x, []).append(j)
    crossings: dict[tuple[str, str], int] = {}  # (tensor, destination unit) → bytes: one copy each
    for n in nodes:
        for x in n["inputs"]:
            i = producer.get(x)
            if i is not None and nodes[i]["unit"] != n["unit"]:
                crossings[(x, f"{nodes[i]['unit']}->{n['unit']}")] = sizes.get(x, 0)
    by_boundary: dict[str, dict] = {}
    for (_, boundary), size in crossings.items():
        row = by_boundary.setdefault(boundary, {"copies": 0, "bytes": 0})
        row["copies"] += 1
        row["bytes"] += size
    total = sum(crossings.values())
    units: dict[str, int] = {}
    for n in nodes:
        units[n["unit"]] = units.get(n["unit"], 0) + 1
    fallback = [{"name": n["name"], "op_type": n["op_type"], "unit": n["unit"], "engine": n["engine"],
                 "why": n.get("why")} for n in nodes if n["engine"] != target]
    cost_ms = (2 * total / (bandwidth_gbps * 1e9) * 1e3) if bandwidth_gbps and target_unit != "cpu" else None
    return {
        "source": source, "how": how, "target_unit": target_unit, "target": target,
        "ops": {n["name"]: n["unit"] for n in nodes}, "units": units,
        "fallback_ops": fallback,
        "cpu_islands": _islands(nodes, consumers, "cpu") if target_unit != "cpu" else 0,
        "copies": len(crossings), "bytes_crossing": total, "boundaries": by_boundary,
        "copy_cost_ms_est": None if cost_ms is None else float(f"{cost_ms:.4g}"),
        "copy_cost_basis": (f"estimate: 2 x bytes / the profile's memory bandwidth ({bandwidth_gbps} GB/s), each "
                            "byte read and written once; launch and sync overheads not counted")
        if cost_ms is not None else None,
    }


def placement_line(p: dict) -> str:
    """The report in one line."""
    units = ", ".join(f"{k} {v}" for k, v in p["units"].items())
    fb = p["fallback_ops"]
    named = ", ".join(f"{f['name']} ({f['op_type']})" for f in fb[:3]) + ("…" if len(fb) > 3 else "")
    cost = f", ~{p['copy_cost_ms_est']:.3g} ms est." if p.get("copy_cost_ms_est") else ""
    return (f"placement ({p['source']}, {p['target']}): {units}; {len(fb)} op(s) off {p['target']}" +
            (f" ({named})" if fb else "") + f"; {p['cpu_islands']} CPU island(s), {p['copies']} copies, "
            f"{p['bytes_crossing']} bytes crossing{cost}")


def check_fallback(p: dict, max_ops: int | None) -> None:
    """The ``--max-fallback-ops`` gate: more ops off the target than ``max_ops`` is exit 5, naming them."""
    if max_ops is None or len(p["fallback_ops"]) <= max_ops:
        return
    fb = p["fallback_ops"]
    named = ", ".join(f"{f['name']} ({f['op_type']} on {f['engine']}" + (f": {f['why']}" if f.get("why") else "")
                      + ")" for f in fb[:6]) + (f" and {len(fb) - 6} more" if len(fb) > 6 else "")
    raise GateFailedError(f"{len(fb)} op(s) would run off {p['target']} ({p['source']}), more than "
                          f"--max-fallback-ops {max_ops}: {named}",
                          "replace or remove those ops, raise --max-fallback-ops, or pick a CPU backend",
                          details={"placement": {k: v for k, v in p.items() if k != "ops"}})
