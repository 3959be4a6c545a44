"""Throughput beyond one stream: parallel streams (generic and OpenVINO's own) and batching."""

from __future__ import annotations

import json
import threading
import time

import onnx
import pytest
from fixtures_convert import DIGITS, make_openvino_artifact, make_ort_artifact

from edgeopt.runtime import throughput


class _InFlightRunner:
    """A stand-in runner (no model) that records how many calls overlap: the property under test is
    that the streams really run at once, whatever the machine's speed."""

    lock = threading.Lock()
    in_flight = 0
    most = 0

    def __init__(self, threads: int):
        self.threads = threads
        self.closed = False

    def run(self, feeds):
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.most = max(cls.most, cls.in_flight)
        time.sleep(0.002)  # releases the GIL, as the runtimes do while they compute
        with cls.lock:
            cls.in_flight -= 1
        return {}

    def close(self):
        self.closed = True


def test_fake_runner_parallel_streams_overlap_and_split_the_threads():
    opened = []

    def open_one(threads):
        opened.append(_InFlightRunner(threads))
        return opened[-1]

    out = throughput.parallel_streams(open_one, {}, streams=3, threads=6, seconds=0.3)
    assert _InFlightRunner.most == 3
    assert len(opened) == 3 and all(r.threads == 2 and r.closed for r in opened)
    assert out["streams"] == 3 and out["threads_per_stream"] == 2
    assert out["runs"] == sum(out["runs_per_stream"]) and min(out["runs_per_stream"]) > 0
    assert out["throughput_qps"] == pytest.approx(out["runs"] / out["seconds"], rel=1e-3)


def test_streams_option_parsing():
    assert throughput.parse_streams(None) is None and throughput.parse_streams("0") is None
    assert throughput.parse_streams("auto") == "auto" and throughput.parse_streams("4") == 4
    for bad in ("-1", "many", "1.5"):
        with pytest.raises(ValueError):
            throughput.parse_streams(bad)


def test_batch_dimension_must_be_symbolic():
    assert throughput.batch_dimension_is_free([{"shape": ["N", 3]}, {"shape": [None, 1]}, {"shape": [-1]}])
    assert not throughput.batch_dimension_is_free([{"shape": ["N", 3]}, {"shape": [1, 3]}])
    assert not throughput.batch_dimension_is_free([])


def _dynamic_batch_artifact(tmp_path):
    art = make_ort_artifact(tmp_path / "dyn")
    m = onnx.load(str(DIGITS))
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, str(art / "model.onnx"))
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["inputs"][0]["shape"][0] = "N"
    manifest["outputs"][0]["shape"][0] = "N"
    (art / "manifest.json").write_text(json.dumps(manifest))
    return art


@pytest.mark.onnxruntime
def test_bench_cli_streams_and_batch_on_onnxruntime(cli, tmp_path):
    static, dynamic = make_ort_artifact(tmp_path / "static"), _dynamic_batch_artifact(tmp_path)
    p = cli("bench", str(static), str(dynamic), "--runs", "10", "--min-seconds", "0.05", "--warmup", "2",
            "--threads", "2", "--streams", "2", "--batch", "4", "--throughput-seconds", "0.3", "--no-store", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)["rows"]}
    for r in rows.values():
        par = r["throughput"]["parallel"]
        assert par["mode"] == "parallel_streams" and par["streams"] == 2 and par["threads_per_stream"] == 1
        assert min(par["runs_per_stream"]) > 0 and par["throughput_qps"] > 0
        assert r["throughput"]["single_stream_qps"] == r["throughput_qps"]
    st = rows["static"]["throughput"]["batched"]
    assert st["supported"] is False and "static batch" in st["reason"]
    dyn = rows["dyn"]["throughput"]["batched"]
    assert dyn["supported"] is True and dyn["batch"] == 4
    assert dyn["throughput_qps"] == pytest.approx(4 * dyn["runs"] / dyn["seconds"], rel=1e-2)


def test_bench_cli_bad_streams_is_a_usage_error(cli, tmp_path):
    p = cli("bench", str(tmp_path), "--streams", "many", "--no-store")
    assert p.returncode == 2 and "--streams" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.openvino
def test_openvino_uses_its_own_throughput_mode(tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    art = make_openvino_artifact(tmp_path / "ov")
    res = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0, warmup=1, store=False, threads=2,
                                              streams=2, throughput_seconds=0.3))
    par = res["rows"][0]["throughput"]["parallel"]
    assert par["mode"] == "openvino_throughput_hint" and par["streams"] == 2 and par["streams_requested"] == 2
    assert par["infer_requests"] >= 2 and par["runs"] > 0 and par["threads"] == 2
    res = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0, warmup=1, store=False, streams="auto",
                                              throughput_seconds=0.3))
    par = res["rows"][0]["throughput"]["parallel"]
    assert par["streams_requested"] == "auto" and par["streams"] >= 1 and par["runs"] > 0


def test_device_runner_rejects_bad_streams(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "edgeopt.runtime", "bench", str(tmp_path), "--streams", "x"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--streams" in p.stderr
