"""Shapes of every tensor in a graph with static inputs.

First ``onnx.shape_inference`` (with data propagation); where that leaves a tensor without a
static shape, the model is run once in ONNX Runtime on dummy inputs with those tensors exposed
as extra outputs, and their real shapes are read off.
"""

from __future__ import annotations

from edgeopt.analyze.costs import TensorMeta
from edgeopt.errors import BadModelError


def _static_shape(vi) -> tuple[int, ...] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            return None
    return tuple(dims)


def _subgraphs(graph):
    for node in graph.node:
        for a in node.attribute:
            yield from ([a.g] if a.HasField("g") else [])
            yield from a.graphs


def _collect_graph(graph, metas: dict[str, TensorMeta]) -> None:
    from onnx import numpy_helper

    for init in graph.initializer:
        metas[init.name] = TensorMeta(tuple(int(d) for d in init.dims), init.data_type, is_param=True)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    arr = numpy_helper.to_array(a.t)
                    metas[node.output[0]] = TensorMeta(tuple(arr.shape), a.t.data_type, is_param=True)
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.name in metas or not vi.type.HasField("tensor_type"):
            continue
        metas[vi.name] = TensorMeta(_static_shape(vi), vi.type.tensor_type.elem_type)
    for sub in _subgraphs(graph):
        _collect_graph(sub, metas)


def _collect(model) -> dict[str, TensorMeta]:
    """Metas of the main graph's tensors and of its subgraphs' (If/Loop/Scan bodies)."""
    metas: dict[str, TensorMeta] = {}
    _collect_graph(model.graph, metas)
    return metas


def _missing(model, metas: dict[str, TensorMeta]) -> list[str]:
    names = []
    for node in model.graph.node:
        for o in node.output:
            if o and (o not in metas or metas[o].shape is None):
                names.append(o)
    return names


def _run_for_shapes(model, names: list[str], metas: dict[str, TensorMeta]) -> dict[str, TensorMeta]:
    """Run the model once in the reference runtime on dummy inputs and read the shapes of ``names``."""
    import numpy as np
    from onnx import helper

    from edgeopt.model import graph_inputs
    from edgeopt.runtime.reference import session, with_outputs

    sess = session(with_outputs(model, names, typed=False), optimize=False)
    feeds = {}
    for spec in graph_inputs(model):
        dtype = np.dtype(spec.dtype) if spec.dtype not in ("object",) else np.float32
        feeds[spec.name] = np.ones([int(d) for d in spec.shape], dtype=dtype)
    wanted = [o.name for o in sess.get_outputs() if o.name in set(names)]
    values = sess.run(wanted, feeds)
    out = {}
    for name, val in zip(wanted, values, strict=True):
        arr = np.asarray(val)
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype) if arr.dtype != object else 8
        out[name] = TensorMeta(tuple(int(d) for d in arr.shape), elem)
    return out


def resolve_shapes(model, origin: str = "model") -> tuple[dict[str, TensorMeta], str, list[str]]:
    """(tensor name -> meta, how shapes were found, names still unknown)."""
    import onnx

    source = "onnx.shape_inference"
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as err:  # noqa: BLE001 - inconsistent graphs: fall back to running it
        inferred = model
        source = f"onnxruntime (onnx shape inference failed: {type(err).__name__})"
    metas = _collect(inferred)
    missing = _missing(inferred, metas)
    if missing:
        try:
            metas.update(_run_for_shapes(model, missing, metas))
            source = "onnx.shape_inference + onnxruntime run on dummy inputs"
        except BadModelError:
            raise
        except Exception as err:  # noqa: BLE001 - keep what inference gave, say what is unknown
            source += f" (onnxruntime run failed: {type(err).__name__}: {str(err).splitlines()[0][:120]})"
    return metas, source, _missing(inferred, metas)
