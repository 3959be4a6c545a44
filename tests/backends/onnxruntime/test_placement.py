"""Where each op runs: the placement report (op -> unit, CPU islands, copies, bytes crossing), asked of the runtime
where it is here, else predicted; the ``--max-fallback-ops`` gate; and bench's honest labels when a GPU build runs
an artifact on another provider."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DATA = REPO / "fixtures" / "data"
TRT, CPU = "TensorrtExecutionProvider", "CPUExecutionProvider"

pytestmark = pytest.mark.onnxruntime


class FakeAssignment:
    """A FAKE node assignment standing in for ONNX Runtime's on a Jetson (no GPU build here): the graph as loaded,
    with the nodes named in ``on_cpu`` assigned to the CPU provider and every other node to TensorRT."""

    def __init__(self, on_cpu: set[str]):
        self.on_cpu = on_cpu

    def __call__(self, model_path, settings, tmp):
        from edgeopt.converters.backends.onnxruntime.as_loaded import optimized_model

        model, _ = optimized_model(model_path, settings, Path(tmp) / "fake.onnx")
        rows = {TRT: [], CPU: []}
        for n in model.graph.node:
            rows[CPU if n.name in self.on_cpu else TRT].append({"name": n.name, "op_type": n.op_type})
        return model, [{"provider": p, "nodes": nodes} for p, nodes in rows.items()]


JETSON_SETTINGS = {"provider": TRT, "fallback_providers": ["CUDAExecutionProvider", CPU],
                   "graph_optimization_level": "ORT_ENABLE_ALL"}


def test_on_a_cpu_only_profile_everything_is_on_the_cpu_with_no_islands():
    from edgeopt.converters.backends.onnxruntime.placement import ort_placement
    from edgeopt.placement.plans import model_placement
    from edgeopt.profiles import load_profile

    ort = ort_placement(MNIST, {"provider": CPU}, target_unit="cpu", bandwidth_gbps=None)
    assert ort["source"] == "runtime" and set(ort["units"]) == {"cpu"}  # ONNX Runtime's own assignment
    assert (ort["cpu_islands"], ort["copies"], ort["bytes_crossing"], ort["fallback_ops"]) == (0, 0, 0, [])
    host = model_placement(MNIST, load_profile("host"))  # host's first backend, asked of its runtime
    assert host["source"] == "runtime" and set(host["units"]) == {"cpu"} and host["cpu_islands"] == 0


def test_a_gpu_profile_counts_islands_copies_and_bytes_from_a_fake_assignment():
    import onnx

    from edgeopt.converters.backends.onnxruntime.placement import ort_placement
    from edgeopt.placement import placement_line

    # FAKE: the first MaxPool on the CPU, between two GPU convolutions (MNIST CNN, float, the graph as loaded)
    pool = next(n.name for n in onnx.load(str(MNIST)).graph.node if n.op_type == "MaxPool")
    p = ort_placement(MNIST, JETSON_SETTINGS, target_unit="gpu", bandwidth_gbps=102.0,
                      assigned_by=FakeAssignment({pool}))
    assert p["source"] == "runtime" and p["units"]["cpu"] == 1 and p["ops"][pool] == "cpu"
    assert [f["name"] for f in p["fallback_ops"]] == [pool] and p["cpu_islands"] == 1
    assert p["copies"] == 2 and set(p["boundaries"]) == {"gpu->cpu", "cpu->gpu"}  # in and out of the island
    sizes = {b: row["bytes"] for b, row in p["boundaries"].items()}
    assert sizes["gpu->cpu"] == 4 * sizes["cpu->gpu"]  # a 2x2 pool: a quarter of the bytes come back
    assert p["copy_cost_ms_est"] == pytest.approx(2 * p["bytes_crossing"] / 102e9 * 1e3, rel=1e-3)
    assert "1 CPU island(s), 2 copies" in placement_line(p)


def test_predicted_on_jetson_int32_dqs_are_cpu_islands_unless_the_optimizer_is_off(tmp_path):
    from edgeopt import convert
    from edgeopt.converters.backends.onnxruntime.placement import ort_placement

    art = tmp_path / "orin"
    convert(MNIST, "jetson-orin-nano", art, calib=DATA / "mnist_calib.npz")
    settings = json.loads((art / "manifest.json").read_text())["runtime"]["settings"]
    on = ort_placement(art / "model.onnx", {**settings, "disabled_optimizers": []}, target_unit="gpu",
                       bandwidth_gbps=102.0)
    off = ort_placement(art / "model.onnx", settings, target_unit="gpu", bandwidth_gbps=102.0)
    assert on["source"] == off["source"] == "predicted"
    assert on["cpu_islands"] == 5 and {f["op_type"] for f in on["fallback_ops"]} == {"DequantizeLinear"}
    assert off["cpu_islands"] == 0 and off["fallback_ops"] == [] and set(off["units"]) == {"gpu"}


@pytest.mark.slow
def test_max_fallback_ops_fails_convert_naming_the_op(tmp_path, monkeypatch):
    import onnx

    from edgeopt import convert
    from edgeopt.converters.backends.onnxruntime import placement as placement_ort
    from edgeopt.errors import GateFailedError

    pool = next(n.name for n in onnx.load(str(DIGITS)).graph.node if n.op_type in ("MaxPool", "Relu"))
    monkeypatch.setattr(placement_ort, "provider_assignment", FakeAssignment({pool}))  # FAKE: one op on the CPU
    with pytest.raises(GateFailedError) as err:  # backend named: no fallback to the profile's next backend
        convert(DIGITS, "jetson-orin-nano", tmp_path / "a", precision="fp32", backend="onnxruntime")
    assert err.value.exit_code == 5 and pool in err.value.message and "--max-fallback-ops 0" in err.value.message
    assert not (tmp_path / "a").exists()  # nothing half-written
    convert(DIGITS, "jetson-orin-nano", tmp_path / "b", precision="fp32", backend="onnxruntime",
            max_fallback_ops=1)  # allowed: written
    report = next(s["report"] for s in json.loads((tmp_path / "b" / "manifest.json").read_text())["stages"]
                  if s["name"] == "onnxruntime")
    assert report["placement"]["max_fallback_ops"] == 1 and report["placement"]["fallback_ops"][0]["name"] == pool


LOUD_BENCH = """
import os, sys, onnxruntime as ort
real = ort.InferenceSession
class FakeLoudProvider:
    '''FAKE: a provider that fails to load and says so on fd 1 (as a C++ library would) and through print().'''
    def __new__(cls, *args, **kwargs):
        os.write(1, b"EP Error: libnvinfer.so.10: cannot open shared object file\\n")
        print("Falling back to ['CPUExecutionProvider'] and retrying.")
        return real(*args, **kwargs)
ort.InferenceSession = FakeLoudProvider
from edgeopt.cli import main
sys.argv = ["edgeopt", "bench", sys.argv[1], "--json", "--runs", "5", "--min-seconds", "0", "--no-store"]
main()
"""


@pytest.mark.slow
def test_bench_json_is_the_only_thing_on_stdout_when_a_provider_prints_there(tmp_path):
    from edgeopt import convert

    art = tmp_path / "digits"
    convert(DIGITS, "host", art, backend="onnxruntime", precision="fp32")
    r = subprocess.run([sys.executable, "-c", LOUD_BENCH, str(art)], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)  # the whole of stdout is one JSON object
    assert "EP Error" in r.stderr and "Falling back" in r.stderr  # the provider's lines went to the real stderr
    assert out["rows"][0]["placement"]["units"] == {"cpu": out["rows"][0]["placement"]["units"]["cpu"]}


class FakeCudaBuild:
    """A FAKE GPU build of ONNX Runtime without TensorRT's libraries: it reports the CUDA provider as the one that
    ran, and runs the model on the real CPU provider."""

    real_session = None

    def __init__(self, path, so=None, providers=None, **kwargs):
        self._cpu = type(self).real_session(path, so, providers=[CPU], **kwargs)

    def get_providers(self):
        return ["CUDAExecutionProvider", CPU]

    def __getattr__(self, name):
        return getattr(self._cpu, name)


def test_cuda_running_an_int8_qdq_artifact_is_labelled_as_float_with_qdq_kernels(tmp_path, monkeypatch, capsys):
    import onnxruntime as ort

    from edgeopt import convert
    from edgeopt.bench.table import execution_lines
    from edgeopt.runtime.runners import onnxruntime as runner
    from edgeopt.runtime.runners import open_runner

    art = tmp_path / "orin"
    convert(DIGITS, "jetson-orin-nano", art, calib=DATA / "digits_calib.npz", backend="onnxruntime")
    monkeypatch.setattr(runner, "_said", set())
    monkeypatch.setattr(FakeCudaBuild, "real_session", ort.InferenceSession)
    monkeypatch.setattr(ort, "InferenceSession", FakeCudaBuild)
    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, "CUDAExecutionProvider", CPU])
    with open_runner(str(art)) as r:
        ex = r.execution
    assert ex["provider"] == "CUDAExecutionProvider" and ex["runs_as"] == runner.CUDA_QDQ and "did not load" in ex["why"]
    assert "runs this INT8 Q/DQ model as float with Q/DQ kernels" in capsys.readouterr().err
    line = execution_lines({"name": "orin", "execution": ex})[0]
    assert "ran on CUDAExecutionProvider as float with Q/DQ kernels, built for TensorrtExecutionProvider" in line


@pytest.mark.slow
def test_analyze_shows_the_placement_before_converting(cli):
    r = cli("analyze", str(MNIST), "--profile", "jetson-orin-nano", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["placement"]
    assert p["source"] == "predicted" and p["target"] == TRT and p["target_unit"] == "gpu"
    assert p["fallback_ops"] == [] and p["cpu_islands"] == 0 and set(p["ops"].values()) == {"gpu"}
    text = cli("analyze", str(MNIST), "--profile", "jetson-orin-nano")
    assert "placement (predicted, TensorrtExecutionProvider)" in text.stdout
