"""The Jetson path (issue 23): 2:4 sparsity only when asked for, every accuracy figure counted from the unpruned FP32
model (a gate that pruning made fail says so), and ONNX Runtime's TensorRT execution provider given its engine cache
on the board.

Real models and data: the bundled digits and MNIST CNNs with their human-labelled test splits. There is no Jetson GPU
here: where the TensorRT provider must be present, it is faked (``FakeTensorrtProvider``, named so) at the one point
ONNX Runtime is asked which providers exist and which one a session took.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt.converters.base import PruneMode
from edgeopt.plan import make_plan
from edgeopt.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
DATA = REPO / "fixtures" / "data"
JETSONS = ["jetson-orin-nano", "jetson-agx-orin"]


def _stage(plan, name):
    return next((s for s in plan.stages if s.name == name), None)


# ------------------------------------------------------------------ 2:4 only when asked for


@pytest.mark.parametrize("profile", JETSONS)
def test_jetson_plans_prune_nothing_unless_asked(profile):
    prof = load_profile(profile)
    assert prof.default_chain.sparsity_2_4  # the board can use 2:4 ...
    plan = make_plan(prof, backend="onnxruntime", precision="int8")
    assert _stage(plan, "prune") is None  # ... and nothing zeroes a weight by default
    assert not any("2:4" in w for w in plan.warnings)
    assert "mode=2:4" not in str(plan)


@pytest.mark.parametrize("how", ["flag", "recipe"])
def test_2_4_when_asked_is_shown_plainly_and_warns(tmp_path, how):
    from edgeopt.converters.prune import SPARSE_2_4_WARNING

    prof = load_profile("jetson-orin-nano")
    if how == "flag":
        plan = make_plan(prof, backend="onnxruntime", precision="int8", prune_mode="2:4")
    else:
        recipe = tmp_path / "r.yaml"
        recipe.write_text("prune_mode: '2:4'\n")
        plan = make_plan(prof, recipe=recipe, backend="onnxruntime", precision="int8")
    prune = _stage(plan, "prune")
    assert prune is not None and prune.config.mode == PruneMode.SPARSE_2_4
    line = next(ln for ln in str(plan).splitlines() if "prune(" in ln)
    assert "mode=2:4" in line and "zeroes=2 of every 4 weights" in line and "fine_tuned=False" in line
    assert "ratio=" not in line  # a ratio of 0.0 read like "off"
    assert SPARSE_2_4_WARNING in plan.warnings
    assert "fine-tunes" in SPARSE_2_4_WARNING and "--recover does not" in SPARSE_2_4_WARNING
    assert _stage(plan, "recover") is None
