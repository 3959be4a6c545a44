"""One rule for the drop ``--max-accuracy-drop`` counts, read the same from a Validation and
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


@pytest.mark.parametrize("samples, passed", [(50, False), (1000, True)])
def test_the_pipeline_gate_keeps_the_convert_gates_room_of_one_sample(samples, passed):
    """Top-1 on 50 samples moves in steps of 2 points: a drop of 1 under a bound of 2 is within it only with one
    sample of room left, as the convert gate and the INT8 searches judge it (validation_model.within_bound)."""
    from edgeopt.pipeline.gates import check
    from edgeopt.pipeline.recipe import Gates

    v = Validation(samples=samples, data_source="eval", synthetic=False, metric="top1_accuracy", metric_kind="top1",
                   metric_unit="%", accuracy_drop=1.0, metric_drop=1.0)
    [gate] = check(Gates(max_accuracy_drop=2.0), validation=v, bench=None, est=None, artifact_bytes=1)
    assert gate.value == 1.0 and gate.passed is passed


@pytest.mark.parametrize("upper, passed", [(2.4, False), (1.9, True)])
def test_the_pipeline_gate_judges_the_upper_confidence_limit_the_convert_gate_measured(upper, passed):
    """A validation with the drop's upper confidence limit (``drop_upper``, what the convert gate judged) is judged
    by it: a 1-point drop up to 2.4 points at 0.9 confidence misses a 2-point bound; the one-sample room (the rule
    for validations without a limit, above) no longer decides."""
    from edgeopt.pipeline.gates import check
    from edgeopt.pipeline.recipe import Gates

    v = Validation(samples=1000, data_source="eval", synthetic=False, metric="top1_accuracy", metric_kind="top1",
                   metric_unit="%", accuracy_drop=1.0, metric_drop=1.0, drop_upper=upper, confidence=0.9)
    [gate] = check(Gates(max_accuracy_drop=2.0), validation=v, bench=None, est=None, artifact_bytes=1)
    assert gate.value == 1.0 and gate.passed is passed
