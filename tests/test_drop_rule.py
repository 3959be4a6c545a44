"""One rule for the drop ``--max-accuracy-drop`` counts (issue 25 item 2), read the same from a Validation and
from its JSON by the convert gate and the pipeline's gate (None: not validated, no drop)."""

from __future__ import annotations

import pytest

from edgeopt.validate import Validation, counted_drop

BASE = {"samples": 10, "data_source": "eval", "synthetic": False, "metric_drop": 1.5}


@pytest.mark.parametrize("fields, expected", [
    ({"accuracy_drop": 0.5}, (0.5, False)),  # labels win over the drop vs FP32
    ({}, (1.5, True)),  # no labels: the task metric vs FP32 on real data
    ({"synthetic": True, "data_source": "synthetic"}, (None, False)),  # never on random inputs
    ({"metric_drop": None}, (None, False)),
])
def test_the_drop_counted_is_the_same_from_a_validation_and_its_json(fields, expected):
    v = Validation(**{**BASE, **fields})
    assert counted_drop(v) == expected
    assert counted_drop(v.model_dump(mode="json")) == expected


def test_no_validation_counts_no_drop():
    assert counted_drop(None) == (None, False)


def test_the_pipeline_gate_counts_the_same_drop():
    from edgeopt.pipeline.gates import check
    from edgeopt.pipeline.recipe import Gates

    v = Validation(**BASE)  # the pipeline's row holds the manifest's validation typed
    [gate] = check(Gates(max_accuracy_drop=1.0), validation=v, bench=None, est=None, artifact_bytes=1)
    assert gate.value == counted_drop(v)[0] == 1.5 and gate.passed is False
