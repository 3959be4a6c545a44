"""A staged early-exit artifact through its runtime's plain API: its ``load.py`` opens each stage with the
backend's own loader and runs the cascade; the consumer check compares each sample's answer and the stage it left
at with edgeopt's cascade runner, and a ``load.py`` that leaves elsewhere is exit 5. The artifact is built by hand
(two ONNX stages, no training) so the check itself is under test."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from fixtures_cascade import hand_cascade, inputs, samples

pytestmark = pytest.mark.onnxruntime


def test_the_cascades_load_py_matches_the_runner_answer_and_exit_stage(tmp_path):
    from edgeopt.consumer.check import check_as_deployed

    art, manifest = hand_cascade(tmp_path / "ee")
    record = check_as_deployed(art, manifest, samples(), version="test")
    assert record.passed is True and record.skipped is None and record.files == ["load.py"]
    assert record.samples == 64 and record.with_settings.applied["stages"] == 2
    assert not (art / "load.cc").exists()  # load.cc runs one model: a cascade is load.py's
    # both stages were reached, so the comparison covered an early and a late answer
    np.savez(tmp_path / "in.npz", x=inputs())
    done = subprocess.run([sys.executable, "-I", "load.py", "--inputs", str(tmp_path / "in.npz"), "--outputs",
                           str(tmp_path / "out.npz")], cwd=art, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = np.load(tmp_path / "out.npz")
    assert out["logits"].shape == (64, 1, 3) and set(out["exit_stage"].ravel().tolist()) == {0, 1}


def test_a_load_py_whose_samples_leave_elsewhere_is_exit_5(tmp_path):
    from edgeopt.consumer.check import check_as_deployed, consumer_check
    from edgeopt.errors import GateFailedError

    art, manifest = hand_cascade(tmp_path / "ee")
    check_as_deployed(art, manifest, samples(), version="test")
    load_py = art / "load.py"
    text = load_py.read_text()
    assert 'probs.max() >= spec["threshold"]' in text
    load_py.write_text(text.replace('probs.max() >= spec["threshold"]', "False"))  # no sample leaves early
    with pytest.raises(GateFailedError) as e:
        consumer_check(art, manifest, samples(), files=["load.py"])
    assert e.value.exit_code == 5 and "differs from edgeopt's runner" in e.value.message
