"""A staged early-exit artifact built by hand: two ONNX stages for ONNX Runtime and its cascade.json, no training
(the consumer check of a cascade is under test, not the early-exit stage)."""

from __future__ import annotations

import json

import numpy as np

THRESHOLD = 0.6


def _model(path, inputs, outputs, nodes, inits):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, path.parent.name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(path))


def _runtime(inputs: list[str], outputs: list[str]) -> dict:
    return {"backend": "onnxruntime", "model": "model.onnx",
            "settings": {"provider": "CPUExecutionProvider", "threads": 1},
            "io": {"inputs": [{"name": n, "runtime_name": n, "transpose": None} for n in inputs],
                   "outputs": [{"name": n, "runtime_name": n, "transpose": None} for n in outputs]}}


def _tensor(name, shape):
    return {"name": name, "shape": shape, "dtype": "float32"}


def hand_cascade(root):
    """Stage 0: x [1,4] -> feature = Relu(x W0) [1,8] and exit0_logits = feature Wh [1,3]; stage 1: feature ->
    logits [1,3]. Returns (artifact dir, manifest)."""
    from onnx import helper

    rng = np.random.default_rng(0)
    w0, wh, w1 = rng.normal(size=(4, 8)), rng.normal(size=(8, 3)) * 2, rng.normal(size=(8, 3))
    _model(root / "stage0" / "model.onnx", [("x", [1, 4])], [("feature", [1, 8]), ("exit0_logits", [1, 3])],
           [helper.make_node("MatMul", ["x", "w0"], ["pre"]), helper.make_node("Relu", ["pre"], ["feature"]),
            helper.make_node("MatMul", ["feature", "wh"], ["exit0_logits"])], {"w0": w0, "wh": wh})
    _model(root / "stage1" / "model.onnx", [("feature", [1, 8])], [("logits", [1, 3])],
           [helper.make_node("MatMul", ["feature", "w1"], ["logits"])], {"w1": w1})
    stages = [
        {"dir": "stage0", "inputs": [_tensor("x", [1, 4])], "feature": "feature", "exit_output": "exit0_logits",
         "threshold": THRESHOLD, "runtime": _runtime(["x"], ["feature", "exit0_logits"]),
         "outputs": [_tensor("feature", [1, 8]), _tensor("exit0_logits", [1, 3])]},
        {"dir": "stage1", "inputs": [_tensor("feature", [1, 8])], "feature": None,
         "runtime": _runtime(["feature"], ["logits"]), "outputs": [_tensor("logits", [1, 3])]}]
    (root / "cascade.json").write_text(json.dumps({"format": 1, "output": "logits", "scores": "logits",
                                                   "stages": stages}))
    runtime = {**_runtime(["x"], ["logits"]), "model": "stage1/model.onnx", "cascade": "cascade.json"}
    manifest = {"runtime": runtime, "inputs": [_tensor("x", [1, 4])], "outputs": [_tensor("logits", [1, 3])],
                "precision": "fp32", "profile": "host"}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root, manifest


def inputs(n=64) -> np.ndarray:
    return np.random.default_rng(1).normal(size=(n, 1, 4)).astype(np.float32)


def samples(n=64):
    from edgeopt.data import Dataset

    return Dataset({"x": inputs(n)}, source="test", ranks={"x": 2})


def timings_by_node_count(monkeypatch, ratio=None):
    """Convert-time timings injected: each model's 'time' is its node count (the cuts and the exit subset then
    depend on the graph and the exit shares alone, not on a loaded machine's timings), and the backend's
    measurement of the cascade says ``ratio`` (None: it runs)."""
    import onnx

    from edgeopt.converters.early_exit import cuts, verify

    monkeypatch.setattr(cuts, "time_models", lambda paths, feed, runs, *how: [
        0.01 * len(onnx.load(str(p)).graph.node) for p in paths])
    if ratio is None:
        return
    monkeypatch.setattr(verify, "measure", lambda root, plain_dir, manifest, data, threads=None: {
        "cascade_ms": ratio, "plain_ms": 1.0, "ratio": ratio, "samples": len(data),
        "backend": manifest["runtime"]["backend"], "timed_with": "injected"})
