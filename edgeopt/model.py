"""Loading a user's ONNX model with clear errors, and fixing its input shapes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import BadModelError, UsageError

# The newest default-domain opset the bundled onnx/onnxruntime understand is checked at run time.


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple  # ints, or str for a symbolic dim, or None for unknown
    dtype: str  # numpy dtype name

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) and d > 0 for d in self.shape)

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", "y=1,10"]`` -> ``{"x": (1, 3, 224, 224), "y": (1, 10)}``; several inputs in one
    string are separated by ';' or by ',' before the next ``NAME=`` (``input=1x576,state=2x1x128``)."""
    import re

    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        for part in re.split(r";|,(?=\s*[A-Za-z_][\w.:/-]*\s*=)", spec):
            if not part.strip():
                continue
            name, sep, dims = part.partition("=")
            try:
                if not sep or not name:
                    raise ValueError
                shape = tuple(int(d) for d in dims.replace(",", "x").split("x"))
                if any(d <= 0 for d in shape):
                    raise ValueError
            except ValueError as err:
                raise UsageError(
                    f"--input-shape '{part}' is not NAME=DIMS",
                    "write it like --input-shape input=1x3x224x224 (several inputs: repeat the option)"
                ) from err
            out[name.strip()] = shape
    return out


def _refuse_backend_model_file(p: Path) -> None:
    """A backend's own model file (a ``.tflite``) is not ONNX: say so rather than fail parsing it."""
    from edgeopt.converters.registry import model_file_backend

    backend = model_file_backend(p)
    if backend is not None:
        raise BadModelError(f"'{p}' is a {backend.value} model; this command needs ONNX", "convert from the ONNX original")


def load_onnx(path: str | Path, *, check: bool = True):
    """Read and check an ONNX model; every failure is a one-line :class:`BadModelError`."""
    import onnx

    p = Path(path)
    if not p.exists():
        raise BadModelError(f"model file '{p}' not found", "check the path")
    if p.is_dir():
        raise BadModelError(f"'{p}' is a directory, not an ONNX file", "pass the .onnx file itself")
    _refuse_backend_model_file(p)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as err:  # DecodeError, truncated protobuf, wrong file
        size = p.stat().st_size
        raise BadModelError(
            f"'{p}' is not a readable ONNX model ({size} bytes; {type(err).__name__})",
            "the file is truncated or not ONNX: re-export it",
        ) from err
    _load_external_data(model, p)
    if not model.graph.node and not model.graph.output:
        raise BadModelError(f"'{p}' is not an ONNX model (empty graph)", "re-export the model to ONNX")
    if check:
        try:
            check_model(model, str(p))
        except BadModelError:
            raise
        except Exception as err:  # noqa: BLE001 - the checker choking on bytes a damaged file decoded to
            first = (str(err).strip().splitlines() or [""])[0][:160]
            raise BadModelError(f"'{p}' is not a valid ONNX model ({type(err).__name__}: {first})",
                                "the file is damaged: re-export it") from err
    return model


def _load_external_data(model, p: Path) -> None:
    """Read the weights a model keeps in other files (ONNX external data), naming a missing one."""
    from onnx.external_data_helper import (
        ExternalDataInfo,
        _get_all_tensors,
        load_external_data_for_model,
        uses_external_data,
    )

    files: list[str] = []
    for t in _get_all_tensors(model):
        if uses_external_data(t):
            loc = ExternalDataInfo(t).location
            if loc not in files:
                files.append(loc)
    if not files:
        return
    for loc in files:
        f = p.parent / loc
        if not f.is_file():
            raise BadModelError(f"'{p}' keeps its weights in '{loc}' (ONNX external data), and '{f}' is missing",
                                f"put '{loc}' back beside {p.name}")
    try:
        load_external_data_for_model(model, str(p.parent))
    except Exception as err:  # noqa: BLE001 - a short or unreadable weights file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise BadModelError(f"'{p}': its external weights ({', '.join(files)}) could not be read: {first}",
                            "the weights file is truncated or belongs to another model: re-export it") from err


def check_model(model, origin: str) -> None:
    import onnx
    import onnx.defs

    newest = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > newest:
            raise BadModelError(
                f"{origin}: opset {imp.version} is newer than this onnx supports ({newest})",
                f"re-export with opset <= {newest}, or upgrade onnx",
            )
    known_domains = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"}
    for node in model.graph.node:
        if node.domain in known_domains and node.domain != "com.microsoft":
            if not onnx.defs.has(node.op_type, node.domain):
                raise BadModelError(
                    f"{origin}: unknown op '{node.op_type}' (node '{node.name}')",
                    "the model uses an operator ONNX does not define; re-export it with standard ops",
                )
    try:
        onnx.checker.check_model(model, full_check=False)
    except (onnx.checker.ValidationError, UnicodeDecodeError, ValueError) as err:  # bad bytes in a name, too
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise BadModelError(f"{origin}: invalid ONNX: {first}", "re-export the model") from err


def _dtype_name(elem_type: int) -> str:
    import onnx.helper

    try:
        import numpy as np

        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001
        return str(elem_type)


def _value_spec(vi) -> TensorSpec:
    t = vi.type.tensor_type
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorSpec(vi.name, tuple(dims), _dtype_name(t.elem_type))


def graph_inputs(model) -> list[TensorSpec]:
    inits = {i.name for i in model.graph.initializer}
    return [_value_spec(v) for v in model.graph.input if v.name not in inits]


def graph_outputs(model) -> list[TensorSpec]:
    return [_value_spec(v) for v in model.graph.output]


def batch_defaults(model, given: dict) -> dict[str, tuple[int, ...]]:
    """Inputs not named by ``--input-shape`` whose only dynamic dim is the leading one of two or more (a batch, as
    exporters write it: ``[batch, 1024]``): converted at batch 1. Any other dynamic dim (an image's height, a
    sequence's length) has no safe default and stays the user's to give."""
    import onnx

    out = {}
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    for spec in graph_inputs(proto):
        lead, rest = spec.shape[:1], spec.shape[1:]
        if spec.name not in given and rest and not isinstance(lead[0], int) and all(isinstance(d, int) for d in rest):
            out[spec.name] = (1, *rest)
    return out


def fix_input_shapes(model, shapes: dict[str, tuple[int, ...]], *, origin: str = "model", require_static: bool = True):
    """Set static input shapes (returns a new model); unknown names or leftover dynamic dims are errors."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    inputs = {v.name: v for v in model.graph.input}
    for name in shapes:
        if name not in inputs:
            from edgeopt.errors import did_you_mean

            names = [s.name for s in graph_inputs(model)]
            raise UsageError(
                f"--input-shape names '{name}', which is not an input of {origin}",
                did_you_mean(name, names) or f"inputs are: {', '.join(names)}",
            )
    changed: list[str] = []  # static dims the override changed: every shape derived from them is stale
    for spec in graph_inputs(model):
        vi = inputs[spec.name]
        if spec.name in shapes:
            shape = shapes[spec.name]
            dims = vi.type.tensor_type.shape.dim
            if len(dims) != len(shape):
                raise UsageError(
                    f"--input-shape {spec.name} has {len(shape)} dims; the model's input has {len(dims)}",
                    f"give {len(dims)} dims, e.g. {spec.name}=" + "x".join(str(d if isinstance(d, int) else 1) for d in spec.shape),
                )
            if any(isinstance(a, int) and a != b for a, b in zip(spec.shape, shape, strict=True)):
                changed.append(f"{spec.name} {'x'.join(str(d) for d in spec.shape)} -> {'x'.join(map(str, shape))}")
            for d, v in zip(dims, shape, strict=True):
                d.Clear()
                d.dim_value = v
        elif require_static and not spec.is_static:
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in spec.shape)
            raise BadModelError(
                f"{origin}: input '{spec.name}' has dynamic dims {list(spec.shape)}",
                f"fix them with --input-shape {spec.name}={example}",
            )
    if shapes:
        _reinfer(model, changed, origin)
    return model


def _reinfer(model, changed: list[str], origin: str) -> None:
    """Drop the shapes recorded for the old input shape (``value_info``, static output dims) so every
    later shape inference starts from the new one; when a static dim changed, the graph must still
    infer at the new shape (strict), or the override is refused instead of reporting stale figures."""
    import onnx

    del model.graph.value_info[:]
    for out in model.graph.output:
        t = out.type.tensor_type
        if t.HasField("shape"):
            for d in t.shape.dim:
                d.Clear()
    if not changed:
        return
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as err:  # noqa: BLE001 - InferenceError / ValidationError: the graph is tied to its old shape
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise BadModelError(
            f"{origin}: --input-shape changes the static dims ({'; '.join(changed)}) and the graph does not work at "
            f"the new shape: {first}",
            "this model is fixed to its exported shape: keep it, or re-export the model for the new one",
        ) from err
