"""How many of an artifact's compute units are quantized, read from the artifact's own model.

A unit is an op that does the model's arithmetic (convolutions, matrix products, recurrent cells). It counts
as quantized when it computes on integers or takes a (fake-)quantized input:

* ONNX: ``QLinearConv``/``QLinearMatMul``/``ConvInteger``/``MatMulInteger``/``DynamicQuantize*``/``QGemm``/
  ``MatMulNBits``; or a unit whose weights (input 1) come from a ``DequantizeLinear`` (QDQ), through layout ops;
* OpenVINO IR: a unit with an input from a ``FakeQuantize`` or from an integer (``i8``/``u8``/``i4``/``u4``)
  constant, through ``Convert``/``Subtract``/``Multiply``/layout layers (NNCF's compressed weights);
* TFLite: a unit, in any subgraph, that computes on int8/int16/uint8 tensors or whose weights are 8-bit constants
  through a ``DEQUANTIZE`` (weight-only).

:func:`units_of` is the one count: each backend's quantizer reports it for what it wrote, and the validation
calls it (through :func:`count_units`) for every artifact; an artifact labelled ``int8`` with no quantized unit
fails its gate (``edgeopt.validate``). TVM's compiled library is not read (None).
"""

from __future__ import annotations

from pathlib import Path

ONNX_UNITS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", "Einsum", "Attention"}
ONNX_INTEGER_UNITS = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM",
                      "DynamicQuantizeMatMul", "QGemm", "QAttention", "MatMulNBits", "MatMulIntegerToFloat"}
ONNX_PASS_THROUGH = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast"}
OV_UNITS = {"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
            "LSTMSequence", "GRUSequence", "RNNSequence", "LSTMCell", "GRUCell", "RNNCell"}
OV_PASS_THROUGH = {"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze", "Squeeze"}
OV_INT_TYPES = {"i8", "u8", "i4", "u4"}
TFLITE_UNITS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV", "CONV_3D",
                "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN"}
TFLITE_INT_TYPES = {"int8", "int16", "int4", "uint8"}
MAX_WALK = 6  # layout/convert ops walked back from a unit's input to its quantizer


def count_units(artifact_dir, runtime: dict) -> dict | None:
    """``{"quantized": q, "float": f, "file": name}`` for the artifact's model named in ``runtime``
    (the manifest's ``runtime`` entry); None when the format is not read (a compiled library) or unreadable."""
    name = str(runtime.get("model") or "")
    path = Path(artifact_dir) / name
    if path.suffix.lower() not in COUNTERS or not path.is_file():
        return None
    try:
        quantized, floating = units_of(path)
    except Exception:  # noqa: BLE001 - a count we can't make is said as "not counted", never a failure
        return None
    return {"quantized": quantized, "float": floating, "file": name}


def units_of(model) -> tuple[int, int]:
    """(quantized, float) units of one model: an ONNX, OpenVINO IR (``.xml``) or TFLite file, or an in-memory
    OpenVINO ``Model`` (what the OpenVINO searches hold before writing); the quantizers report this count."""
    if not isinstance(model, (str, Path)):
        quantized, total = _openvino_units(*_ov_model_graph(model))
    else:
        counter = COUNTERS.get(Path(model).suffix.lower())
        if counter is None:
            raise ValueError(f"no unit count for '{Path(model).name}' (ONNX, OpenVINO IR or TFLite)")
        quantized, total = counter(Path(model))
    return quantized, total - quantized


def _onnx(path: Path) -> tuple[int, int]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {out: n for n in graph.node for out in n.output}

    def dequantized(tensor: str, depth: int = 0) -> bool:
        node = producer.get(tensor)
        if node is None or depth > MAX_WALK:
            return False
        if node.op_type == "DequantizeLinear":
            return True
        return node.op_type in ONNX_PASS_THROUGH and bool(node.input) and dequantized(node.input[0], depth + 1)

    quantized = total = 0
    for n in graph.node:
        if n.op_type in ONNX_INTEGER_UNITS:
            quantized, total = quantized + 1, total + 1
        elif n.op_type in ONNX_UNITS:  # QDQ: quantized when its weights (input 1) come dequantized
            total += 1
            quantized += len(n.input) > 1 and dequantized(n.input[1])
    return quantized, total


def _openvino(path: Path) -> tuple[int, int]:
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    layers = {}
    for layer in root.iter("layer"):
        data = layer.find("data")
        layers[layer.get("id")] = (layer.get("type"), (data.get("element_type") if data is not None else None))
    inputs: dict[str, list[str]] = {}
    for e in root.iter("edge"):
        inputs.setdefault(e.get("to-layer"), []).append(e.get("from-layer"))
    return _openvino_units(layers, inputs)


def _ov_model_graph(ov_model) -> tuple[dict, dict]:
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


def _openvino_units(layers: dict, inputs: dict) -> tuple[int, int]:
    def quantizer(lid, depth: int = 0) -> bool:
        kind, etype = layers.get(lid, (None, None))
        if kind == "FakeQuantize" or (kind == "Const" and etype in OV_INT_TYPES):
            return True
        return kind in OV_PASS_THROUGH and depth < MAX_WALK and any(quantizer(i, depth + 1) for i in inputs.get(lid, ()))

    units = [lid for lid, (kind, _) in layers.items() if kind in OV_UNITS]
    return sum(any(quantizer(i) for i in inputs.get(lid, ())) for lid in units), len(units)


def _tflite(path: Path) -> tuple[int, int]:
    """Every subgraph (onnx2tf puts a recurrent layer's cell in a WHILE body), weight-only INT8 included (8-bit
    constants through a DEQUANTIZE), read with ai-edge-quantizer's flatbuffer reader; without that library (the
    tflite extra), LiteRT's listing of the main subgraph."""
    try:
        from edgeopt.converters.backends.tflite.ops import unit_counts

        return unit_counts(path, TFLITE_UNITS)
    except ImportError:
        return _tflite_main_subgraph(path)


def _tflite_main_subgraph(path: Path) -> tuple[int, int]:
    from edgeopt.runtime.runners.tflite import open_interpreter

    interp = open_interpreter(str(path))
    dtypes = {t["index"]: str(getattr(t["dtype"], "__name__", t["dtype"])) for t in interp.get_tensor_details()}
    quantized = total = 0
    for op in interp._get_ops_details():  # noqa: SLF001 - LiteRT's only listing of a model's ops
        if op["op_name"] not in TFLITE_UNITS:
            continue
        total += 1
        quantized += any(dtypes.get(int(i)) in TFLITE_INT_TYPES for i in op["inputs"] if int(i) >= 0)
    return quantized, total


COUNTERS = {".onnx": _onnx, ".xml": _openvino, ".tflite": _tflite}
