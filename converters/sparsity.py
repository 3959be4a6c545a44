"""2:4 semi-structured sparsity: in every group of 4 consecutive weights along the reduction axis, zero the 2 smallest.

The reduction (input-channel) axis is axis 1 of a Conv weight ``[O, I/g, kh, kw]`` (groups of 4 input
channels at a fixed output channel and kernel position, as NVIDIA's sparse tensor cores read them), axis 1
of a Gemm ``B`` with ``transB=1`` (``[N, K]``), axis 0 with ``transB=0`` (``[K, N]``), and axis -2 of a MatMul
``B``. Layers whose reduction length is not a multiple of 4 are left dense. Shapes do not change: the zeros
only turn into speed on a runtime with sparse kernels (TensorRT on Ampere or newer, e.g. Jetson Orin).
"""

from __future__ import annotations

import numpy as np

SPEEDUP_NOTE = (
    "2:4 sparsity keeps shapes and only zeroes weights: the speed-up needs a runtime with sparse kernels "
    "(TensorRT on an Ampere-or-newer GPU, e.g. Jetson Orin), which edgeopt cannot run here; ONNX Runtime, "
    "OpenVINO, TFLite and TVM CPU kernels run it at dense speed. Accuracy usually needs sparse fine-tuning "
    "(NVIDIA ASP recipe: prune a trained model, then retrain a few epochs with the mask fixed)."
)
FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def mask_2_4(w: np.ndarray, axis: int) -> np.ndarray:
    """``w`` with the 2 smallest-magnitude weights zeroed in every group of 4 along ``axis`` (a copy)."""
    moved = np.moveaxis(np.array(w, copy=True), axis, -1)
    k = moved.shape[-1]
    if k % 4:
        raise ValueError(f"reduction length {k} is not a multiple of 4")
    groups = moved.reshape(*moved.shape[:-1], k // 4, 4)
    smallest = np.argsort(np.abs(groups), axis=-1, kind="stable")[..., :2]
    np.put_along_axis(groups, smallest, 0, axis=-1)
    return np.moveaxis(groups.reshape(moved.shape), -1, axis)


def _reduction_axis(node, init_dims: tuple, attrs: dict) -> int | None:
    if node.op_type == "Conv":
        return 1
    if node.op_type == "Gemm":
        return 1 if attrs.get("transB", 0) else 0
    if node.op_type == "MatMul" and len(init_dims) >= 2:
        return len(init_dims) - 2
    return None


def sparsify(model, skip: tuple[str, ...] = ()) -> tuple[object, dict]:
    """A copy of ``model`` with 2:4 sparsity applied to every eligible weight, and the report."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in model.graph.initializer}
    uses: dict[str, set[int | None]] = {}
    covered, not_covered = [], {}
    zeros = total = 0
    targets: dict[str, tuple[int, str]] = {}
    for i, node in enumerate(model.graph.node):
        if node.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        label = node.name or f"{node.op_type}#{i}"
        if label in skip:
            not_covered[label] = "in the skip list"
            continue
        w_name = node.input[1] if len(node.input) > 1 else ""
        if w_name not in inits:
            not_covered[label] = "weight is not a constant initializer"
            continue
        init = inits[w_name]
        if init.data_type not in FLOAT_TYPES:
            not_covered[label] = "weight is not floating point"
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axis = _reduction_axis(node, tuple(init.dims), attrs)
        if axis is None:
            not_covered[label] = "weight has fewer than 2 dims"
            continue
        k = init.dims[axis]
        if k % 4:
            not_covered[label] = f"reduction length {k} is not a multiple of 4"
            continue
        uses.setdefault(w_name, set()).add(axis)
        targets[label] = (axis, w_name)
    for label, (_axis, w_name) in targets.items():
        if len(uses[w_name]) > 1:
            not_covered[label] = "weight shared by layers with different reduction axes"
            continue
        covered.append(label)
    done: set[str] = set()
    for label in covered:
        axis, w_name = targets[label]
        if w_name in done:
            continue
        done.add(w_name)
        arr = numpy_helper.to_array(inits[w_name])
        sparse = mask_2_4(arr, axis)
        zeros += int(np.count_nonzero(sparse == 0))
        total += int(sparse.size)
        inits[w_name].CopyFrom(numpy_helper.from_array(sparse.astype(arr.dtype), w_name))
    all_weights = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type in FLOAT_TYPES)
    report = {
        "mode": "2:4",
        "layers_covered": covered,
        "layers_not_covered": not_covered,
        "zero_share_covered": (zeros / total) if total else None,
        "covered_weights": total,
        "covered_share_of_float_params": (total / all_weights) if all_weights else None,
        "note": SPEEDUP_NOTE,
    }
    return model, report
