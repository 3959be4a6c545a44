"""What ``convert`` prints for a person (no ``--json``): where the artifact was checked."""

from __future__ import annotations

import pytest


@pytest.mark.onnxruntime
def test_convert_says_on_which_provider_it_checked_a_jetson_artifact(mnist_model, tmp_path, cli):
    r = cli("convert", mnist_model, "--profile", "jetson-orin-nano", "--precision", "fp32", "-o", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert ("checked on CPUExecutionProvider, not the artifact's TensorrtExecutionProvider: " in r.stdout), r.stdout
