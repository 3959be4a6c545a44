"""One RunRecord (edgeopt/run_record.py): what local bench returns and the store accepts, one id name (run_id),
unknown keys rejected, its JSON the keys that were set. Remote bench's record is checked through the CLI in
test_remote.py (``run_id`` of the stored row)."""

from __future__ import annotations

import pytest
from fixtures_convert import make_ort_artifact
from pydantic import ValidationError

from edgeopt import results
from edgeopt.run_record import RunRecord

RUN = {"schema_version": 1, "backend": "onnxruntime", "precision": "fp32", "latency_ms": {"p50": 2.0, "n": 3},
       "inputs": {"source": "random", "synthetic": True}, "energy": None, "environment": {"location": "local"}}


def test_a_record_keeps_the_keys_it_was_made_from_and_reads_by_key():
    r = RunRecord.model_validate(RUN)
    assert r.to_json() == RUN  # fields never set are not added (no "run_id": null)
    assert r.backend == "onnxruntime" and r["latency_ms"]["p50"] == 2.0 and "run_id" not in r
    r["run_id"] = 7
    assert r.run_id == 7 and r.to_json()["run_id"] == 7
    with pytest.raises(KeyError):
        r["device"]


@pytest.mark.parametrize("bad", [{"result_id": 3}, {"latency_ms": {"p50": 1.0, "p55": 1.0}},
                                 {"backend": "onnxruntim"}, {"precision": "int7"}])
def test_undeclared_keys_and_bad_values_are_rejected_by_the_record_and_the_store(tmp_path, bad):
    with pytest.raises(ValidationError):
        RunRecord.model_validate({**RUN, **bad})
    with pytest.raises(ValidationError):
        results.store_run({**RUN, **bad}, tmp_path / "r.db")


@pytest.mark.onnxruntime
def test_local_bench_returns_run_records_stored_under_their_run_id(tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    art = make_ort_artifact(tmp_path / "fp32")
    db = tmp_path / "r.db"
    out = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0.0, warmup=1, threads=1, db=str(db)))
    (row,) = out["rows"]
    assert isinstance(row, RunRecord) and row.run_id is not None
    stored = results.get_run(row.run_id, db)["result"]
    after_storing = {"run_id", "best", "status"}  # set on the row once stored
    assert stored == {k: v for k, v in row.to_json().items() if k not in after_storing}
