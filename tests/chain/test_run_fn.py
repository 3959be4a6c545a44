"""``run_fn`` is the one factory of run functions: an ONNX file or ModelProto in a plain ONNX Runtime session, an
artifact through its runner, or a model file with the runtime entry of an artifact not yet written; each returns
the same outputs by name for the same feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from edgeopt.runtime.run_fn import run_fn

pytestmark = pytest.mark.onnxruntime

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
FEED = {"input": np.linspace(0, 1, 64, dtype=np.float32).reshape(1, 1, 8, 8)}


def test_an_onnx_file_and_its_model_proto_give_the_same_outputs_and_feeds_are_cast_and_filtered():
    by_path = run_fn(DIGITS, 1)(FEED)
    proto = run_fn(onnx.load(str(DIGITS)), 1, spinning=False)
    assert list(by_path) == ["logits"] and by_path["logits"].shape == (1, 10)
    np.testing.assert_array_equal(proto(FEED)["logits"], by_path["logits"])
    float64 = {"input": FEED["input"].astype(np.float64), "not_an_input": np.zeros(3)}  # cast, and ignored
    np.testing.assert_array_equal(proto(float64)["logits"], by_path["logits"])
    assert proto.session.get_inputs()[0].name == "input"


def test_an_artifact_and_a_model_file_with_its_runtime_entry_run_through_the_runner(tmp_path, monkeypatch):
    from edgeopt.bench.api import reference_artifact
    from edgeopt.files import file_sha256

    monkeypatch.setenv("EDGEOPT_CACHE_DIR", str(tmp_path / "cache"))
    expected = run_fn(DIGITS, 1)(FEED)["logits"]
    artifact = run_fn(reference_artifact(DIGITS, file_sha256(DIGITS)), 1)
    assert type(artifact.runner).__module__ == "edgeopt.runtime.runners.onnxruntime"
    np.testing.assert_allclose(artifact(FEED)["logits"], expected, rtol=1e-5, atol=1e-6)
    loose = tmp_path / "candidate.onnx"  # a search's candidate: a file beside others, not an artifact
    loose.write_bytes(DIGITS.read_bytes())
    io = {kind: [{"name": n, "runtime_name": n, "transpose": None}] for kind, n in (("inputs", "input"),
                                                                                 ("outputs", "logits"))}
    runtime = {"backend": "onnxruntime", "model": "model.onnx", "settings": {"threads": 1}, "io": io}
    np.testing.assert_allclose(run_fn(loose, 1, runtime=runtime)(FEED)["logits"], expected, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "candidate.dir" / "model.onnx").is_file()


def test_the_reference_is_the_registrys_backend_opened_by_its_runner():
    """The reference backend is declared once, in the registry; the reference module names it by reading it, and its
    session is the reference backend's runner's, on the CPU, with the graph as written when asked."""
    from edgeopt.converters.registry import REFERENCE
    from edgeopt.runtime import reference

    assert reference.REFERENCE == REFERENCE.value and reference.REFERENCE_FP32 == f"{REFERENCE.value}-fp32"
    assert reference.REFERENCE_RUNTIME.startswith(REFERENCE.value + " (")
    with pytest.raises(AttributeError):
        reference.NOT_A_NAME  # noqa: B018
    sess = reference.session(DIGITS.read_bytes(), threads=1, optimize=False)
    assert type(sess).__module__.startswith(REFERENCE.value) and sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_allclose(sess.run(None, FEED)[0], run_fn(DIGITS, 1)(FEED)["logits"], rtol=1e-5, atol=1e-5)


def test_a_run_error_is_told_from_an_error_in_the_code_around_it():
    from edgeopt.runtime import reference

    sess = reference.session(DIGITS)
    with pytest.raises(Exception) as run_error:
        sess.run(None, {"input": np.zeros((1, 1, 3, 3), np.float32)})  # a shape the model can't take
    assert reference.is_run_error(run_error.value)
    assert not reference.is_run_error(ValueError("raised by edgeopt's code"))
