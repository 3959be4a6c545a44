"""The measurement core, the environment/power readers and the device-side runner CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures_convert import make_ort_artifact

from edgeopt.runtime import environment
from edgeopt.runtime.measure import (
    StopRule,
    feeds_from_npz,
    latency_stats,
    measure,
    measure_interleaved,
    median_ci_ranks,
    synthetic_feeds,
)

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DIGITS_NPZ = REPO / "fixtures" / "data" / "digits_test.npz"


class FakeClock:
    """Each call of the timed function advances time by ``step`` seconds: no real waiting."""

    def __init__(self, step: float):
        self.now = 0.0
        self.step = step
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def run(self) -> None:
        self.calls += 1
        self.now += self.step


# --------------------------------------------------------------------------- stop rules (fake clock)


def test_fake_clock_duration_rule_needs_more_runs_than_the_count():
    c = FakeClock(1 / 128)  # 7.8 ms a run (exact in binary): 2 s needs 256 runs although 50 were asked
    r = measure(c.run, warmup=3, min_runs=50, min_seconds=2.0, clock=c, cpu_clock=c)
    assert r["runs"] == 256
    assert r["stop_rule"] == StopRule.MIN_RUNS_AND_SECONDS
    assert c.calls == 259  # warm-up runs are not samples
    assert len(r["samples_ms"]) == 256
    assert r["latency_ms"]["p50"] == pytest.approx(1000 / 128)


def test_fake_clock_count_rule_needs_more_runs_than_the_duration():
    c = FakeClock(1 / 128)
    r = measure(c.run, warmup=0, min_runs=120, min_seconds=0.25, clock=c, cpu_clock=c)
    assert r["runs"] == 120  # 0.25 s is reached after 32 runs; the count rule holds out
    assert r["stop_rule"] == StopRule.MIN_RUNS_AND_SECONDS


def test_fake_clock_safety_limits():
    c = FakeClock(1 / 128)
    r = measure(c.run, warmup=1, min_runs=10_000, min_seconds=0, max_runs=77, clock=c, cpu_clock=c)
    assert (r["runs"], r["stop_rule"]) == (77, StopRule.MAX_RUNS)
    c = FakeClock(1.0)
    r = measure(c.run, warmup=1, min_runs=10_000, min_seconds=1e9, max_seconds=30, clock=c, cpu_clock=c)
    assert r["stop_rule"] == StopRule.MAX_SECONDS
    assert r["runs"] == 30


def test_fake_clock_interleaved_blocks_alternate_and_each_meets_its_rules():
    order: list[str] = []
    c = FakeClock(1 / 64)

    def f():
        order.append("f")
        c.run()

    def g():
        order.append("g")
        c.now += 3 / 64  # g is 3x slower: it needs fewer runs for the same duration

    res = measure_interleaved([f, g], warmup=2, min_runs=20, min_seconds=1.0, block_seconds=0.1, clock=c,
                              cpu_clock=c)
    assert [r["runs"] for r in res] == [64, 22]
    assert all(r["stop_rule"] == StopRule.MIN_RUNS_AND_SECONDS for r in res)
    timed = order[4:]  # after the warm-ups
    switches = sum(1 for a, b in zip(timed, timed[1:], strict=False) if a != b)
    assert switches >= 5  # blocks alternate between the two, not one after the other


def test_progress_reaches_one_and_only_grows():
    c = FakeClock(1 / 64)
    seen: list[float] = []
    measure(c.run, warmup=0, min_runs=10, min_seconds=1.0, progress=seen.append, clock=c, cpu_clock=c)
    assert seen[-1] == 1.0
    assert seen == sorted(seen)


def test_real_function_records_rss_cpu_and_first_inference():
    a = np.random.default_rng(0).standard_normal((64, 64))
    r = measure(lambda: a @ a, warmup=2, min_runs=5, min_seconds=0.0, load_ms=12.5, threads=1)
    assert r["runs"] == 5 and r["load_ms"] == 12.5 and r["threads"] == 1
    assert r["peak_rss_mb"] > 1 and r["first_inference_ms"] > 0
    assert 0 <= r["cpu_utilisation"] <= 1.5


# --------------------------------------------------------------------------- statistics


def test_percentiles_match_numpy_on_known_samples():
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 0.4, 997)
    s = latency_stats(x)
    for q in (50, 90, 99):
        assert s[f"p{q}"] == pytest.approx(np.percentile(x, q))
    assert s["mean"] == pytest.approx(x.mean())
    assert s["std"] == pytest.approx(x.std(ddof=1))
    assert (s["min"], s["max"]) == (x.min(), x.max())


@pytest.mark.parametrize("n", [6, 10, 25, 50, 101, 1000, 5000])
def test_median_ci_matches_scipy_quantile_test(n):
    from scipy.stats import quantile_test

    x = np.random.default_rng(n).lognormal(0.0, 0.5, n)
    ci = quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(0.95)
    s = latency_stats(x)
    assert (s["ci95_low"], s["ci95_high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))


@pytest.mark.parametrize("n", [6, 20, 77, 400])
def test_median_ci_ranks_are_the_narrowest_with_95_percent_coverage(n):
    from scipy.stats import binom

    lo, hi, coverage = median_ci_ranks(n)
    assert coverage == pytest.approx(binom.cdf(hi - 1, n, 0.5) - binom.cdf(lo - 1, n, 0.5))
    assert coverage >= 0.95
    narrower = binom.cdf(hi - 2, n, 0.5) - binom.cdf(lo, n, 0.5)  # one rank in on both sides
    assert narrower < 0.95


def test_tiny_samples_give_the_full_range_with_its_real_coverage():
    lo, hi, coverage = median_ci_ranks(4)
    assert (lo, hi) == (1, 4) and coverage == pytest.approx(1 - 2 / 16)


# --------------------------------------------------------------------------- environment and power


def test_environment_snapshot_has_the_facts():
    env = environment.after(environment.collect("emulated"))
    assert env["location"] == "emulated"
    assert env["libraries"]["numpy"] == np.__version__
    assert env["cores_used"] and env["python"]
    assert len(env["load_before"]) == 3 and len(env["load_after"]) == 3
    assert "interference" in env and "_cpu_counters_before" not in env  # None when the window is < 1 tick


def test_interference_counts_a_busy_neighbour_but_not_our_own_work():
    """A real busy child process is "other"; the same amount of work in this process is not.

    Stated in CPU seconds that hold whatever else the machine runs: other processes only add to "other", so
    the neighbour's 1 s is a floor, and our own 1 s is always taken out of the busy time."""
    def spin(seconds):
        t_end = time.process_time() + seconds
        while time.process_time() < t_end:
            pass

    def other_seconds(before, after):
        got = environment.interference(before, after)
        return got["other_busy_pct"] / 100 * (after["total_s"] - before["total_s"])

    tick = 2 / os.sysconf("SC_CLK_TCK") + 0.05  # /proc/stat counts in clock ticks; the percentage is rounded
    before = environment.cpu_counters()
    spin(1.0)
    after = environment.cpu_counters()
    busy = after["busy_s"] - before["busy_s"]
    assert after["own_s"] - before["own_s"] >= 0.95
    assert other_seconds(before, after) <= max(0.0, busy - 0.95) + tick  # our own second is not "other"
    # a neighbour: spins 1 s of CPU, says so, then waits; read before it is reaped (a reaped child's
    # time counts as this process's own, by design)
    spinner = "import sys,time\nt=time.process_time()+1.0\nwhile time.process_time()<t: pass\nprint('done',flush=True)\nsys.stdin.read()"
    before = environment.cpu_counters()
    p = subprocess.Popen([sys.executable, "-c", spinner], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "done"
    after = environment.cpu_counters()
    p.communicate("")
    assert other_seconds(before, after) >= 0.95 - tick  # the neighbour's second is, whatever else ran too


def test_fake_proc_stat_steal_and_others(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    _write(tmp_path / "proc/stat", "cpu  300 20 80 1000 50 10 5 110 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    c = environment.cpu_counters(str(tmp_path))  # user nice system idle iowait irq softirq steal
    assert c["busy_s"] == pytest.approx(415 / hz) and c["steal_s"] == pytest.approx(110 / hz)
    assert c["total_s"] == pytest.approx(1575 / hz)
    assert environment.cpu_counters(str(tmp_path / "nowhere")) is None
    a = {"busy_s": 100 / hz, "steal_s": 10 / hz, "total_s": 1000 / hz, "own_s": 0.0}
    b = {"busy_s": 400 / hz, "steal_s": 110 / hz, "total_s": 2000 / hz, "own_s": 100 / hz}
    got = environment.interference(a, b)
    assert got["other_busy_pct"] == 20.0 and got["steal_pct"] == 10.0
    assert environment.interference_warning({"interference": got}).startswith("machine not idle")
    assert environment.interference_warning({"interference": {"other_busy_pct": 2.0, "steal_pct": 1.0}}) is None
    assert environment.interference_warning({}) is None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_fake_sysfs_rapl_energy_with_wraparound(tmp_path):
    d = tmp_path / "sys/class/powercap/intel-rapl:0"
    _write(d / "energy_uj", "999000000")
    _write(d / "max_energy_range_uj", "1000000000")
    _write(tmp_path / "sys/class/powercap/intel-rapl:0:0/energy_uj", "5")  # a sub-domain: not counted
    meter = environment.open_power_meter(str(tmp_path))
    assert meter.kind == "rapl" and len(meter.domains) == 1
    meter.start()
    _write(d / "energy_uj", "2000000")  # wrapped: 1 J to the top + 2 J after
    e = meter.stop()
    assert e["source"] == "measured" and e["joules"] == pytest.approx(3.0)


def test_fake_sysfs_ina3221_prefers_the_board_input_rail(tmp_path):
    dev = tmp_path / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    _write(dev / "in_power0_input", "5000")  # mW
    _write(dev / "rail_name_0", "POM_5V_IN")
    _write(dev / "in_power1_input", "1200")
    _write(dev / "rail_name_1", "POM_5V_GPU")
    meter = environment.open_power_meter(str(tmp_path))
    assert meter.kind == "ina3221" and list(meter.rails) == ["POM_5V_IN"]
    meter.start()
    e = meter.stop()
    assert e["avg_power_w"] == pytest.approx(5.0) and e["joules"] >= 0


def test_fake_sysfs_ina3221_hwmon_volts_times_amps(tmp_path):
    hw = tmp_path / "sys/class/hwmon/hwmon3"
    _write(hw / "name", "ina3221")
    _write(hw / "in1_input", "5000")  # mV
    _write(hw / "curr1_input", "800")  # mA
    _write(hw / "in1_label", "VDD_IN")
    meter = environment.open_power_meter(str(tmp_path))
    assert meter.read_watts() == pytest.approx(4.0)


def test_no_power_meter_on_an_empty_sysfs(tmp_path):
    assert environment.open_power_meter(str(tmp_path)) is None


# --------------------------------------------------------------------------- inputs


def test_npz_inputs_take_sample_zero_and_synthetic_inputs_follow_the_manifest():
    spec = [{"name": "input", "shape": [1, 1, 8, 8], "dtype": "float32"}]
    feeds = feeds_from_npz(spec, str(DIGITS_NPZ))
    assert feeds["input"].shape == (1, 1, 8, 8)
    assert np.array_equal(feeds["input"], np.load(DIGITS_NPZ)["input"][:1])
    syn = synthetic_feeds([{"name": "x", "shape": ["batch", 3], "dtype": "int64"}])
    assert syn["x"].shape == (1, 3) and syn["x"].dtype == np.int64


# --------------------------------------------------------------------------- the device-side CLI


def _device_cli(*args, cwd=None, module="edgeopt.runtime", pre: str = ""):
    code = f"import sys; {pre}import runpy; sys.argv=['x', *sys.argv[1:]]; runpy.run_module('{module}', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.onnxruntime
def test_device_cli_on_a_real_ort_artifact_prints_valid_json(tmp_path):
    art = make_ort_artifact(tmp_path / "art")
    samples = tmp_path / "samples.txt"
    p = _device_cli("bench", str(art), "--inputs", str(DIGITS_NPZ), "--threads", "1", "--warmup", "2",
                    "--min-runs", "30", "--min-seconds", "0.05", "--location", "remote", "--samples-out", str(samples))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["ok"] and out["schema_version"] == 1
    assert out["backend"] == "onnxruntime" and out["precision"] == "fp32"
    import hashlib

    assert out["artifact_hash"] == hashlib.sha256((art / "manifest.json").read_bytes()).hexdigest()
    assert out["runs"] >= 30 and len(out["samples_ms"]) == out["runs"]
    assert out["latency_ms"]["ci95_low"] <= out["latency_ms"]["p50"] <= out["latency_ms"]["ci95_high"]
    assert out["inputs"]["synthetic"] is False
    assert out["environment"]["location"] == "remote"
    assert out["environment"]["libraries"]["onnxruntime"]
    assert len(samples.read_text().split()) == out["runs"]
    progress = [json.loads(line) for line in p.stderr.splitlines() if line.startswith("{")]
    assert progress and progress[-1] == {"progress": 1.0}


@pytest.mark.onnxruntime
def test_device_cli_runs_as_a_copied_package_without_edgeopt(tmp_path):
    """On a device the package is copied as ``edgeopt_runtime``: it must not need the rest of edgeopt."""
    shutil.copytree(REPO / "edgeopt" / "runtime", tmp_path / "edgeopt_runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    art = make_ort_artifact(tmp_path / "art")
    p = _device_cli("bench", str(art), "--min-runs", "5", "--min-seconds", "0", "--warmup", "1", cwd=tmp_path,
                    module="edgeopt_runtime", pre="sys.path.insert(0, '.'); sys.modules['edgeopt'] = None; ")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["inputs"]["synthetic"] is True and out["runs"] >= 5


def test_device_cli_missing_artifact_exits_3(tmp_path):
    p = _device_cli("bench", str(tmp_path / "nope"))
    assert p.returncode == 3
    assert json.loads(p.stdout)["error"]["kind"] == "bad_artifact"
    assert "Traceback" not in p.stderr


def test_device_cli_inputs_of_the_wrong_shape_exit_3(tmp_path):
    art = make_ort_artifact(tmp_path / "art")
    np.savez(tmp_path / "bad.npz", input=np.zeros((2, 3), np.float32))
    p = _device_cli("bench", str(art), "--inputs", str(tmp_path / "bad.npz"), "--min-runs", "1", "--min-seconds", "0")
    assert p.returncode == 3, p.stderr
    assert "failed to run" in json.loads(p.stdout)["error"]["message"]


def test_device_cli_runtime_missing_exits_4(tmp_path):
    art = make_ort_artifact(tmp_path / "art")
    p = _device_cli("bench", str(art), pre="sys.modules['onnxruntime'] = None; ")
    assert p.returncode == 4, p.stderr
    assert json.loads(p.stdout)["error"]["kind"] == "runtime_missing"


def test_a_measurement_reports_the_runtimes_the_artifact_was_built_with(tmp_path):
    """The device side names no backend: it reports the distributions the manifest recorded (the host side every
    backend's, from the registry)."""
    from edgeopt.converters.registry import distributions
    from edgeopt.runtime.environment import collect, recorded_libraries

    art = make_ort_artifact(tmp_path / "art")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["versions"]["openvino"] = "-"
    (art / "manifest.json").write_text(json.dumps(manifest))
    assert recorded_libraries(str(art)) == ("numpy", "onnx", "onnxruntime", "openvino")
    assert recorded_libraries(str(tmp_path / "missing")) == ()
    env = collect("remote", libraries=recorded_libraries(str(art)))
    assert {"numpy", "onnx", "onnxruntime", "openvino"} <= set(env["libraries"])
    assert "openvino" not in collect("remote")["libraries"]  # only what a caller names, besides numpy and onnx
    assert {"openvino", "apache-tvm", "ai-edge-litert"} <= set(distributions())


def test_a_runtime_error_is_told_by_its_message_not_by_where_it_was_raised():
    from edgeopt.runtime.measure import BadArtifact, check_runs

    class Refuses:
        def run(self, feeds):
            raise RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp:224:\n"
                               "Exception from src/plugins/intel_cpu/src/node.cpp:1234:\n"
                               "[CPU] FakeQuantize node with name 'fq_7' has unsupported levels\n")

    with pytest.raises(BadArtifact) as e:
        check_runs(Refuses(), {"x": np.zeros((1, 3), np.float32)}, "art")
    assert "RuntimeError: [CPU] FakeQuantize node with name 'fq_7' has unsupported levels" in str(e.value)
    assert "infer_request.cpp" not in str(e.value)


def test_a_long_node_name_keeps_the_runtime_message_tail():
    """OpenVINO names a fused node by all its ops (400 characters on Basic Pitch's convolutions): the reason
    ("ACLCommonExecutor: function is not configured") comes after it and is kept, the name's middle elided."""
    from edgeopt.runtime.measure import BadArtifact, check_runs

    node = ";".join(f"model_1/conv2d_2/BiasAdd/ReadVariableOp_{i}" for i in range(12))

    class Refuses:
        def run(self, feeds):
            raise RuntimeError(f"Exception from src/inference/src/cpp/infer_request.cpp:224:\nNode {node} of type "
                               "Convolution Check 'iFunction' failed at acl_common_executor.cpp:128:\n"
                               "ACLCommonExecutor: function is not configured\n")

    with pytest.raises(BadArtifact) as e:
        check_runs(Refuses(), {"x": np.zeros((1, 3), np.float32)}, "art")
    text = str(e.value)
    assert text.endswith("ACLCommonExecutor: function is not configured") and "RuntimeError: Node model_1/" in text
    assert " … " in text and len(text) < 400
