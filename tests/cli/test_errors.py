"""A bug in edgeopt stays a bug (exit 1, traceback under --debug); a library failing on the user's model is
one "bad input" line (exit 3) that keeps its cause for --debug."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgeopt.errors import ExitCode, is_edgeopt_bug


def _raised(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001
        return err
    raise AssertionError("did not raise")


def test_type_error_inside_edgeopt_is_a_bug():
    from edgeopt.files import file_sha256

    assert is_edgeopt_bug(_raised(lambda: file_sha256(None)))


def test_errors_raised_by_libraries_are_not_edgeopt_bugs():
    assert not is_edgeopt_bug(_raised(lambda: json.dumps(object())))  # TypeError in json's own code
    assert not is_edgeopt_bug(_raised(lambda: np.zeros(3).reshape(2, 2)))  # ValueError: not a bug type
    assert not is_edgeopt_bug(_raised(lambda: {}["k"]))  # raised in this test file, not in edgeopt


# A stage's run() replaced, in the real CLI process, by one that fails the given way.
_DRIVER = """
import sys, json
from edgeopt.converters.normalize import Normalize
from edgeopt.files import file_sha256
how = sys.argv[1]
Normalize.run = (lambda self, *a: file_sha256(None)) if how == "bug" else (lambda self, *a: json.dumps(object()))
from edgeopt.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("how,code", [("bug", ExitCode.INTERNAL), ("library", ExitCode.BAD_INPUT)])
def test_stage_failure_exit_code_says_whose_fault(how, code, repo, tmp_path):
    model = repo / "fixtures/models/digits_cnn.onnx"
    args = ["convert", str(model), "--profile", "host", "-o", str(tmp_path / "out")]
    r = subprocess.run([sys.executable, "-c", _DRIVER, how, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    assert ("internal error" in r.stderr) == (how == "bug")
    assert not (tmp_path / "out").exists()
    debug = subprocess.run([sys.executable, "-c", _DRIVER, how, "--debug", *args], capture_output=True, text=True,
                           timeout=300)
    assert debug.returncode == code
    assert "Traceback" in debug.stderr and ("file_sha256" in debug.stderr if how == "bug" else "json" in debug.stderr)
