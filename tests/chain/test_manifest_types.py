"""The manifest's validation is a typed ``Validation`` end to end, and every manifest comes from one builder.

An artifact written before ``Manifest.validation`` was typed (a dict with the keys of today) still loads, typed,
and is written back byte for byte; bench's ONNX Runtime FP32 reference is a ``Manifest`` like convert's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgeopt.artifact import BUILD, MANIFEST, Manifest, load_artifact, write_manifest
from edgeopt.files import file_sha256
from edgeopt.validate import CheckedOn, Validation

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"

# a validation as convert wrote it before it was typed: every key of today, an infinite error written as "inf"
OLD_VALIDATION = {
    "samples": 540, "data_source": "eval", "synthetic": False, "cosine_min": 0.998372, "cosine_mean": 0.9999,
    "max_abs_err": "inf", "top1_agreement": 1.0, "accuracy_reference": 99.4444, "accuracy": 99.4444,
    "accuracy_drop": 0.0, "metric": "top1_accuracy", "metric_kind": "top1", "metric_description": "top-1 accuracy against the labels",
    "metric_unit": "%", "metric_basis": "labels", "metric_reference": 99.4444, "metric_value": 99.4444,
    "metric_drop": 0.0, "metric_outputs": None, "units": {"quantized": 5, "float": 0, "file": "model.onnx"},
    "checked_on": {"provider": "CPUExecutionProvider", "target": "CPUExecutionProvider", "why": None},
    "sample_points": 100 / 540, "halves_drop_p90": None, "drop_upper": None, "confidence": None,
    "gates": {"int8_quantized_units": {"threshold": 1.0, "value": 5.0, "passed": True},
              "max_accuracy_drop": {"threshold": 1.0, "value": 0.0, "passed": True}},
}


def _old_artifact(d: Path, **fields) -> bytes:
    """An artifact directory as the untyped writer left it (the keys in the model's order, indent 2); ``fields``
    replace the manifest's."""
    d.mkdir()
    (d / "model.onnx").write_bytes(b"not a model: only its sha256 is read")
    manifest = {
        "edgeopt_version": "0.1.0", "backend": "onnxruntime", "precision": "int8", "profile": "host",
        "profile_requested": None, "source_model": {"path": "m.onnx", "sha256": "0" * 64, "from_torch": None,
                                                    "weights": None},
        "inputs": [{"name": "input", "shape": [1, 1, 8, 8], "dtype": "float32", "layout": None, "preprocessing": None}],
        "outputs": [{"name": "logits", "shape": [1, 10], "dtype": "float32", "layout": None, "preprocessing": None}],
        "runtime": {"backend": "onnxruntime", "model": "model.onnx", "settings": {}},
        "stages": [{"name": "onnxruntime", "config": {}, "checks": {}, "report": {}}],
        "versions": {"edgeopt": "0.1.0"}, "files": {"model.onnx": file_sha256(d / "model.onnx")},
        "validation": OLD_VALIDATION,
        "calibration": {"source": "digits_calib.npz", "samples": 128, "synthetic": False},
        "plan_hash": "ab" * 32, "plan": {"backend": "onnxruntime"}, "warnings": [], "created": "1970-01-01T00:00:00+00:00",
        "determinism": {"deterministic": True, "why": "ONNX Runtime writes the same model"}, "build_facts": BUILD,
        "backend_fallback": [], "backend_search": [], "precision_fallback": None, "verified_on": None, "memory": None,
        "consumer_check": None, "speed_claim": None,
    }
    assert list(manifest) == list(Manifest.model_fields)  # the test writes every field, in the writer's order
    manifest.update(fields)
    text = (json.dumps(manifest, indent=2) + "\n").encode()
    (d / MANIFEST).write_bytes(text)
    (d / BUILD).write_text(json.dumps({"timings": {"stages": [{"seconds": 0.5}]}}))
    return text


def test_an_old_manifest_loads_typed_and_is_written_back_byte_identical(tmp_path):
    before = _old_artifact(tmp_path / "art")
    m = load_artifact(tmp_path / "art")
    v = m.validation
    assert isinstance(v, Validation) and v.max_abs_err == float("inf") and v.passed
    assert v.checked_on == CheckedOn(provider="CPUExecutionProvider", target="CPUExecutionProvider")
    assert v.gates["int8_quantized_units"].value == 5.0 and v.units["quantized"] == 5
    assert m.stages[0].seconds == 0.5  # build.json's timing merged back
    write_manifest(tmp_path / "art", m)
    assert (tmp_path / "art" / MANIFEST).read_bytes() == before


def test_an_old_manifests_fallbacks_and_determinism_load_typed_and_are_written_back_byte_identical(tmp_path):
    from edgeopt.artifact import BackendLeft, Determinism, PrecisionFallback

    left = {"backend": "openvino", "exit_code": 5, "reason": "openvino: INT8 misses --max-accuracy-drop 1"}
    fell = {"requested": "int8", "reason": "quantize: INT8 misses --max-accuracy-drop 1", "exit_code": 5}
    before = _old_artifact(tmp_path / "art", precision="fp16", backend_fallback=[left], precision_fallback=fell)
    m = load_artifact(tmp_path / "art")
    assert m.determinism == Determinism(deterministic=True, why="ONNX Runtime writes the same model")
    assert m.backend_fallback == [BackendLeft(**left)] and m.precision_fallback == PrecisionFallback(**fell)
    write_manifest(tmp_path / "art", m)
    assert (tmp_path / "art" / MANIFEST).read_bytes() == before


def test_bench_reference_artifact_is_a_manifest_from_the_one_builder(tmp_path, monkeypatch):
    from edgeopt.bench.api import REFERENCE_NOTE, reference_artifact
    from edgeopt.runtime.runners import open_runner

    monkeypatch.setenv("EDGEOPT_CACHE_DIR", str(tmp_path / "cache"))
    ref = reference_artifact(DIGITS, file_sha256(DIGITS))
    m = load_artifact(ref)  # a Manifest, and its files' sha256 checked
    assert (m.backend, m.precision, m.profile, m.validation) == ("onnxruntime", "fp32", None, None)
    assert m.plan.note == REFERENCE_NOTE and set(m.files) == {"model.onnx"}
    assert m.versions["onnxruntime"] and m.source_model.sha256 == file_sha256(DIGITS)
    assert m.inputs[0].name == "input" and m.inputs[0].shape == [1, 1, 8, 8]
    assert reference_artifact(DIGITS, file_sha256(DIGITS)) == ref  # cached by content
    with open_runner(str(ref)) as runner:
        out = runner.run({"input": np.zeros((1, 1, 8, 8), np.float32)})
    assert next(iter(out.values())).shape == (1, 10)


def test_a_wrapped_tflite_file_gets_its_manifest_from_the_one_builder(tmp_path, monkeypatch):
    """An existing .tflite taken as an artifact: the manifest ``build_manifest`` makes, with what wrapping it always
    said (no profile, no plan, not validated, edgeopt's and LiteRT's versions, the inputs' layout guessed)."""
    from edgeopt import artifact, wrapped_artifact
    from edgeopt.converters.backends.tflite import wrapped as tflite_wrapped

    built, real_builder = [], artifact.build_manifest
    monkeypatch.setattr(artifact, "build_manifest", lambda **kw: built.append(kw) or real_builder(**kw))
    src = tmp_path / "m.tflite"
    src.write_bytes(b"not read: LiteRT's view of it is faked")
    spec = {"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}
    monkeypatch.setattr(tflite_wrapped, "tflite_specs",
                        lambda path: ([spec], [dict(spec, name="y", shape=[1, 8, 8, 3])], "fp32"))
    m = load_artifact(wrapped_artifact.wrap_model_file(src, tmp_path / "art", threads=2))
    assert len(built) == 1 and built[0]["backend"] == "tflite"
    assert (m.backend, m.precision, m.profile, m.validation, m.stages) == ("tflite", "fp32", "none", None, [])
    assert m.plan.note == wrapped_artifact.WRAPPED_NOTE and m.plan_hash == ""
    assert m.warnings == [wrapped_artifact.WRAPPED_WARNING] and set(m.versions) == {"edgeopt", "ai-edge-litert"}
    assert (m.inputs[0].layout, m.outputs[0].layout) == ("NCHW", None) and set(m.files) == {"model.tflite"}
    assert m.source_model.sha256 == file_sha256(src)
    assert m.runtime.model_dump(mode="json") == {"backend": "tflite", "model": "model.tflite", "settings": {"threads": 2, "delegate": "xnnpack"},
                         "io": {"inputs": [{"name": "x", "runtime_name": "x", "transpose": None}],
                                "outputs": [{"name": "y", "runtime_name": "y", "transpose": None}]}}


def test_only_the_builder_constructs_a_manifest():
    """``Manifest(...)`` is called in ``edgeopt/artifact.py`` only (its ``build_manifest``): every other writer
    goes through it (there were three: convert, the TFLite backend's wrap, bench's reference as a raw dict)."""
    import ast

    calls = []
    for root in ("edgeopt", "converters", "remote", "bench"):
        for f in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Manifest":
                    calls.append(f.relative_to(REPO).as_posix())
    assert calls == ["edgeopt/artifact.py"]
