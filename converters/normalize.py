"""Stage ``normalize``: a checked, static-shape, folded FP32 ONNX model (the chain's oracle).

ONNX checker; input shapes fixed (``--input-shape``; dynamic dims without it are an error
naming the fix); NaN/Inf in the weights refused (naming the initializer; ±inf only inside a Conv/Gemm/MatMul/embedding
weight, since a -inf scalar feeding Max or a mask is legitimate); shape inference;
constant folding and Conv+BatchNorm(+ReLU) folding with onnxslim. Output names are kept
(restored if the simplifier renamed one). The result is checked against the input model on
``ctx.check_samples`` (cosine >= ``min_cosine``).
"""

from __future__ import annotations

import time

import numpy as np
from pydantic import Field

from edgeopt.converters.base import ChainContext, ChainOptions, Format, Intermediate, Stage, StageConfig
from edgeopt.converters.registry import register_stage
from edgeopt.errors import BadModelError, StageError


class NormalizeConfig(StageConfig):
    input_shapes: dict[str, tuple[int, ...]] = {}
    fold: bool = True  # constant folding + Conv/BN fusion with onnxslim
    # Older models are upgraded to this opset (and to IR >= 7): the quantizers and runtimes need it,
    # and IR < 4 (initializers listed as graph inputs) does not survive constant folding.
    min_opset: int = Field(default=13, ge=7)
    min_cosine: float = 0.9999


def count_ops(model, op_type: str) -> int:
    return sum(1 for n in model.graph.node if n.op_type == op_type)


# Inputs of these ops that hold learned weights (op -> input indices): ±inf there means broken weights.
# Anywhere else a ±inf constant is legitimate: the identity of a Max/Min reduction, a mask value fed to
# Add/Where (JAX and TF exports have them).
WEIGHT_INPUTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (0, 1, 2), "MatMul": (0, 1), "Gather": (0,),
    "LSTM": (1, 2, 3), "GRU": (1, 2, 3), "RNN": (1, 2, 3), "BatchNormalization": (1, 2, 3, 4),
    "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2), "Einsum": (), "EmbedLayerNormalization": (2, 3, 4),
}


def _constants(model):
    """(name, array) of every initializer and Constant node's tensor in the main graph."""
    from onnx import numpy_helper

    for init in model.graph.initializer:
        yield init.name, numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    yield node.output[0], numpy_helper.to_array(attr.t)


def check_finite_weights(model, origin: str) -> list[str]:
    """NaN anywhere in the constants is an error; ±inf only inside a weight (:data:`WEIGHT_INPUTS`).
    Returns the names of the ±inf constants that were accepted (masks, reduction identities)."""
    weights: dict[str, str] = {}
    for node in model.graph.node:
        for i in WEIGHT_INPUTS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i]:
                weights.setdefault(node.input[i], node.op_type)
    accepted = []
    for name, arr in _constants(model):
        if arr.dtype.kind not in "fc" or not arr.size:
            continue
        nan = int(np.count_nonzero(np.isnan(arr)))
        inf = int(np.count_nonzero(np.isinf(arr)))
        if nan:
            raise BadModelError(f"{origin}: weight '{name}' holds {nan} NaN values",
                                "the model's weights are broken: re-export or retrain it")
        if inf and name in weights:
            raise BadModelError(f"{origin}: weight '{name}' of a {weights[name]} holds {inf} infinite values",
                                "the model's weights are broken: re-export or retrain it")
        if inf:
            accepted.append(name)
    return accepted


def restore_output_names(model, names: list[str]) -> None:
    """Make the graph's outputs carry ``names`` again (in order), renaming tensors if needed."""
    current = [o.name for o in model.graph.output]
    if current == names:
        return
    if len(current) != len(names):
        raise StageError(f"normalize: the simplifier changed the number of outputs ({len(names)} -> {len(current)})")
    for old, new in zip(current, names, strict=True):
        if old == new:
            continue
        for node in model.graph.node:
            node.output[:] = [new if o == old else o for o in node.output]
            node.input[:] = [new if i == old else i for i in node.input]
    for out, new in zip(model.graph.output, names, strict=True):
        out.name = new
    assert [o.name for o in model.graph.output] == names


def set_static_output_dims(proto, path, feed) -> bool:
    """Give outputs with symbolic dims the static shape one run shows (inputs are static by now)."""
    from edgeopt.runtime.run_fn import run_fn

    dynamic = [o for o in proto.graph.output
               if any(not d.HasField("dim_value") for d in o.type.tensor_type.shape.dim) or not o.type.tensor_type.HasField("shape")]
    if not dynamic:
        return False
    got = run_fn(path)(feed)
    for o in dynamic:
        shape = o.type.tensor_type.shape
        shape.ClearField("dim")
        for v in np.shape(got[o.name]):
            shape.dim.add().dim_value = int(v)
    return True


def upgrade_opset(proto, min_opset: int, origin: str) -> dict | None:
    """Upgrade a default-domain opset below ``min_opset`` (and IR < 7); None when nothing changed."""
    import onnx
    from onnx import version_converter

    opset = next((i.version for i in proto.opset_import if i.domain in ("", "ai.onnx")), None)
    if opset is None or (opset >= min_opset and proto.ir_version >= 7):
        return None
    ir_before = proto.ir_version
    model = proto
    if opset < min_opset:
        try:
            model = version_converter.convert_version(proto, min_opset)
        except Exception as err:  # noqa: BLE001 - the converter raises plain RuntimeErrors
            raise StageError(
                f"normalize: {origin} uses opset {opset} and could not be upgraded to {min_opset} ({type(err).__name__})",
                "re-export the model with opset >= 13",
            ) from err
    model.ir_version = max(model.ir_version, 7)
    onnx.checker.check_model(model)
    return {"model": model, "opset_from": opset, "opset_to": max(opset, min_opset), "ir_from": ir_before, "ir_to": model.ir_version}


def synthetic_feeds(model_path, n: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    from edgeopt.data import synthetic_dataset
    from edgeopt.model import graph_inputs, load_onnx

    return synthetic_dataset(graph_inputs(load_onnx(model_path, check=False)), n, seed=seed).feeds()


@register_stage
class Normalize(Stage):
    name = "normalize"
    Config = NormalizeConfig
    accepts = (Format.ONNX,)
    produces = Format.ONNX

    @classmethod
    def configure(cls, options: ChainOptions) -> NormalizeConfig:
        return NormalizeConfig(input_shapes=dict(options.input_shapes))

    def run(self, model: Intermediate, config: NormalizeConfig, ctx: ChainContext) -> Intermediate:
        import onnx

        from edgeopt.converters.checks import compare_onnx
        from edgeopt.model import check_model, fix_input_shapes, load_onnx

        origin = model.path.name
        proto = load_onnx(model.path)
        out_names = [o.name for o in proto.graph.output]
        proto = fix_input_shapes(proto, dict(config.input_shapes), origin=origin, require_static=True)
        infinite = check_finite_weights(proto, origin)
        report_upgrade = upgrade_opset(proto, config.min_opset, origin)
        if report_upgrade:
            proto = report_upgrade.pop("model")
        before = ctx.work_dir / "normalize_input.onnx"
        onnx.save(proto, str(before))
        report = {"nodes_before": len(proto.graph.node), "batchnorm_before": count_ops(proto, "BatchNormalization")}
        if report_upgrade:
            report["upgraded"] = report_upgrade
        if infinite:  # masks / reduction identities: legitimate, noted
            report["infinite_constants"] = infinite[:20]
        try:
            proto = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=False)
        except Exception as err:  # noqa: BLE001 - shape inference is best effort; the checker already passed
            ctx.warn(f"normalize: shape inference failed ({type(err).__name__}); continuing without it")
        if config.fold:
            import onnxslim

            t0 = time.perf_counter()
            slimmed = onnxslim.slim(proto)
            if slimmed is None:
                raise StageError("normalize: onnxslim could not simplify the model", "rerun with a recipe 'stages: {normalize: {fold: false}}'")
            proto = slimmed
            report["slim_seconds"] = round(time.perf_counter() - t0, 3)
        restore_output_names(proto, out_names)
        check_model(proto, f"{origin} (normalized)")
        report.update(nodes_after=len(proto.graph.node), batchnorm_after=count_ops(proto, "BatchNormalization"))
        out = ctx.work_dir / "normalized.onnx"
        onnx.save(proto, str(out))
        feeds = ctx.check_samples.feeds() if ctx.check_samples is not None and len(ctx.check_samples) else synthetic_feeds(out)
        if set_static_output_dims(proto, out, feeds[0]):
            onnx.save(proto, str(out))

        checks = compare_onnx(before, out, feeds)
        checks["min_cosine"] = config.min_cosine
        ctx.record_checks(checks)
        ctx.stage_report().update(report)
        if checks["cosine_min"] is not None and checks["cosine_min"] < config.min_cosine:
            raise StageError(
                f"normalize: the folded model differs from the original (cosine {checks['cosine_min']:.6f} < {config.min_cosine})",
                "rerun with a recipe 'stages: {normalize: {fold: false}}'",
            )
        return Intermediate(out, Format.ONNX, model.precision, {**model.notes, "normalize": report})
