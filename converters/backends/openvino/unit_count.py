"""Quantized compute units of an OpenVINO model: a unit (convolution, matrix product, recurrent cell) is quantized
when an input comes from a ``FakeQuantize`` or from an integer (``i8``/``u8``/``i4``/``u4``) constant, through
``Convert``/``Subtract``/``Multiply``/layout layers (NNCF's compressed weights). Read from an IR's ``.xml`` or
from an in-memory ``Model`` (what the searches hold before writing), by the same rule."""

from __future__ import annotations

from pathlib import Path

UNITS = {"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
         "LSTMSequence", "GRUSequence", "RNNSequence", "LSTMCell", "GRUCell", "RNNCell"}
PASS_THROUGH = {"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze", "Squeeze"}
INT_TYPES = {"i8", "u8", "i4", "u4"}
MAX_WALK = 6  # layers walked back from a unit's input to its quantizer


def ir_units(path: Path) -> tuple[int, int]:
    """(quantized, total) units of the IR whose ``.xml`` is ``path``."""
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    layers = {}
    for layer in root.iter("layer"):
        data = layer.find("data")
        layers[layer.get("id")] = (layer.get("type"), (data.get("element_type") if data is not None else None))
    inputs: dict[str, list[str]] = {}
    for e in root.iter("edge"):
        inputs.setdefault(e.get("to-layer"), []).append(e.get("from-layer"))
    return graph_units(layers, inputs)


def model_graph(ov_model) -> tuple[dict, dict]:
    """An in-memory OpenVINO model as the IR reads: layer id -> (IR type, a constant's element type), and each
    layer's input layers."""
    layers, inputs = {}, {}
    for op in ov_model.get_ordered_ops():
        kind = op.get_type_name()
        const = kind == "Constant"
        layers[op.get_instance_id()] = ("Const" if const else kind,
                                        op.get_output_element_type(0).get_type_name() if const else None)
        inputs[op.get_instance_id()] = [i.get_source_output().get_node().get_instance_id() for i in op.inputs()]
    return layers, inputs


def graph_units(layers: dict, inputs: dict) -> tuple[int, int]:
    def quantizer(lid, depth: int = 0) -> bool:
        kind, etype = layers.get(lid, (None, None))
        if kind == "FakeQuantize" or (kind == "Const" and etype in INT_TYPES):
            return True
        return kind in PASS_THROUGH and depth < MAX_WALK and any(quantizer(i, depth + 1) for i in inputs.get(lid, ()))

    units = [lid for lid, (kind, _) in layers.items() if kind in UNITS]
    return sum(any(quantizer(i) for i in inputs.get(lid, ())) for lid in units), len(units)
