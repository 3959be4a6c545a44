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


# manifests convert wrote before the runtime entry, stages, plan and searches were typed: ONNX Runtime (host INT8 and
# the Jetson TensorRT preset), OpenVINO (host), TFLite (pi5), TVM, an early-exit staged artifact, DBNet's map output
WRITTEN = sorted((Path(__file__).parent / "data" / "manifests").glob("*.json"))
# records as the untyped writers left them (bench/results): a --verify-on run on the emulated pi5 and a
# --backend auto search with a dropped, a timed and a chosen backend
OLD_VERIFIED_ON = {
    "device": "pi5-emu", "profile": "pi5", "emulated": True, "samples": 8, "max_abs_diff": 0.00017699599266052246,
    "tolerance": 0.009999997615814209, "rule": "float output of an int8 artifact: 0.01 x output scale (1)",
    "error_vs_fp32": None, "passed": True,
    "outputs": {"softmax_11.tmp_0": {"max_abs_diff": 0.00017699599266052246, "tolerance": 0.009999997615814209,
                                     "rule": "float output of an int8 artifact: 0.01 x output scale (1)", "passed": True}},
    "device_arch": "aarch64", "runtime": "the artifact's runtime on the device (emulated: qemu-user on this host)"}
OLD_BACKEND_SEARCH = [
    {"backend": "openvino", "precision": "int8", "metric": "top1_accuracy", "metric_drop": -0.4251,
     "units": {"quantized": 1, "float": 3, "file": "model.xml"}, "latency_ms": 23.9766,
     "speedup_vs_onnxruntime_fp32": 0.983, "verdict": "dropped", "why": "slower: 24 ms vs 11.4 ms (onnxruntime)"},
    {"backend": "onnxruntime", "precision": "int8", "metric": "top1_accuracy", "metric_drop": 0,
     "units": {"quantized": 4, "float": 0, "file": "model.onnx"}, "latency_ms": 11.4343,
     "speedup_vs_onnxruntime_fp32": 2.062, "verdict": "chosen", "why": "the fastest that holds the bound",
     "timing": "p50 ms on this machine, each runtime in its own block of calls, vs ONNX Runtime FP32 23.6 ms"},
    {"backend": "tflite", "verdict": "dropped", "exit_code": 5, "why": "tflite: INT8 misses --max-accuracy-drop 1"}]


def _written_back(tmp_path: Path, m: Manifest) -> bytes:
    from edgeopt.artifact import _write_json, split_volatile

    _write_json(tmp_path / MANIFEST, split_volatile(m.model_dump(mode="json"))[0])
    return (tmp_path / MANIFEST).read_bytes()


def test_the_fixture_manifests_cover_every_backend_and_the_staged_and_jetson_cases():
    kinds = {(m["backend"], m["profile"], bool(m["runtime"].get("cascade"))) for m in map(_json, WRITTEN)}
    assert {("onnxruntime", "host", False), ("openvino", "host", False), ("tflite", "pi5", False),
            ("tvm", "host", False), ("onnxruntime", "jetson-orin-nano", False), ("onnxruntime", "host", True)} <= kinds


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_each_written_manifest_loads_typed_and_is_written_back_byte_identical(tmp_path):
    for path in WRITTEN:
        m = Manifest.model_validate_json(path.read_bytes())
        assert _written_back(tmp_path, m) == path.read_bytes(), path.name
        assert m.runtime.model and m.plan.plan_hash == m.plan_hash and [s.name for s in m.plan.stages] == \
            [s.name for s in m.stages], path.name


def test_a_manifest_written_before_the_qdq_rename_names_its_stage_quantize_and_is_read_as_written():
    """digits-host-ort.json ran the ONNX Q/DQ stage under its old name: read, its stage and plan keep 'quantize'
    (written back byte for byte above; the recipe-side alias is converters.registry.STAGE_ALIASES)."""
    m = Manifest.model_validate_json((Path(__file__).parent / "data" / "manifests" / "digits-host-ort.json").read_bytes())
    assert [s.name for s in m.stages] == [s.name for s in m.plan.stages] == ["normalize", "quantize", "onnxruntime"]
    assert next(s for s in m.stages if s.name == "quantize").report["quantized"]["quantized_units"] > 0


def test_the_typed_entries_read_by_attribute():
    m = {p.stem: Manifest.model_validate_json(p.read_bytes()) for p in WRITTEN}
    jetson, pi5, tvm, staged = m["digits-jetson-orin-nano"], m["digits-pi5"], m["digits-host-tvm"], m["mnist-early-exit"]
    assert jetson.runtime.engine_build.built_here is False and jetson.runtime.float_layers.count == 0
    assert jetson.runtime.settings["provider"] == "TensorrtExecutionProvider"
    assert pi5.runtime.io.inputs[0].transpose == [0, 2, 3, 1] and pi5.runtime.io.outputs[0].runtime_name == "output_0"
    assert tvm.runtime.host_twin is None and tvm.runtime.settings["device"] == "cpu"
    assert staged.runtime.cascade and any(s.name == "early_exit" for s in staged.stages)
    assert all(isinstance(s.report, dict) for s in pi5.stages)


def test_old_verified_on_and_backend_search_records_load_typed_and_are_written_back_with_only_the_renamed_key(
        tmp_path):
    """A manifest written before ``speedup_vs_reference`` was renamed: read, the figure in the new field, and written
    back byte for byte except that key's name, in its place."""
    from edgeopt.manifest_types import BackendSearchRow, VerifiedOn

    path = next(p for p in WRITTEN if p.stem == "digits-pi5")
    data = _json(path)
    data.update(verified_on=OLD_VERIFIED_ON, backend_search=OLD_BACKEND_SEARCH)
    text = (json.dumps(data, indent=2) + "\n").encode()
    m = Manifest.model_validate_json(text)
    assert isinstance(m.verified_on, VerifiedOn) and m.verified_on.passed and m.verified_on.device == "pi5-emu"
    assert [type(r) for r in m.backend_search] == [BackendSearchRow] * 3
    assert [r.verdict for r in m.backend_search] == ["dropped", "chosen", "dropped"]
    assert m.backend_search[1].metric_drop == 0 and m.backend_search[2].latency_ms is None
    assert [r.speedup_vs_reference for r in m.backend_search] == [0.983, 2.062, None]
    assert _written_back(tmp_path, m) == text.replace(b'"speedup_vs_onnxruntime_fp32"', b'"speedup_vs_reference"')
    assert _written_back(tmp_path, Manifest.model_validate_json(_written_back(tmp_path, m))) == \
        _written_back(tmp_path, m)


def test_an_entry_refuses_a_key_it_does_not_know():
    import pytest
    from pydantic import ValidationError

    from edgeopt.manifest_types import RuntimeEntry

    with pytest.raises(ValidationError):
        RuntimeEntry.model_validate({"backend": "onnxruntime", "model": "model.onnx", "settings": {}, "extra": 1})


def test_an_inputs_preprocessing_is_the_typed_preprocess_and_reads_back_as_written():
    from edgeopt.artifact import TensorInfo
    from edgeopt.data import Preprocess, parse_preprocess

    pre = parse_preprocess("resize=224x224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225")
    written = TensorInfo(name="x", shape=[1, 3, 224, 224], dtype="float32", layout="NCHW",
                         preprocessing=pre).model_dump(mode="json")
    read = TensorInfo.model_validate(json.loads(json.dumps(written)))
    assert isinstance(read.preprocessing, Preprocess) and read.preprocessing.resize == (224, 224)
    assert read.model_dump(mode="json") == written
