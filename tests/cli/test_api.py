"""The public API re-exported from ``edgeopt`` stays callable, even where a function and a module share a name
(``edgeopt.convert``, ``edgeopt.analyze``, ``edgeopt.optimize``) and the module has been imported."""

from __future__ import annotations

import subprocess
import sys


def test_api_functions_that_share_a_module_name_stay_callable(repo, tmp_path):
    script = f"""
import edgeopt
model = {str(repo / 'fixtures/models/digits_cnn.onnx')!r}
first = edgeopt.analyze(model, "pi5")
second = edgeopt.analyze(model, "pi5")  # the analyze package is imported by now
assert first.model_dump() == second.model_dump()
out = edgeopt.convert(model, "host", {str(tmp_path / 'a')!r}, precision="fp32")
again = edgeopt.convert(model, "host", {str(tmp_path / 'b')!r}, precision="fp32")
assert out.manifest.files == again.manifest.files
from edgeopt.convert import ConvertResult  # the modules are still importable
from edgeopt.optimize import optimizer
assert callable(edgeopt.optimize) and isinstance(out, ConvertResult) and optimizer.__name__ == "edgeopt.optimize.optimizer"
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
