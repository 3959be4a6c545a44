"""The Jetson path: 2:4 sparsity only when asked for, every accuracy figure counted from the unpruned FP32
model (a gate that pruning made fail says so), and ONNX Runtime's TensorRT execution provider given its engine cache
on the board.

Real models and data: the bundled digits and MNIST CNNs with their human-labelled test splits. There is no Jetson GPU
here: where the TensorRT provider must be present, it is faked (``FakeTensorrtProvider``, named so) at the one point
ONNX Runtime is asked which providers exist and which one a session took.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures_models import digits_datasets

from edgeopt.converters.base import ChainContext, Intermediate, PruneMode, StageRecord
from edgeopt.errors import GateFailedError
from edgeopt.plan import make_plan
from edgeopt.profiles import load_profile

REPO = Path(__file__).resolve().parents[3]
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
    from edgeopt.converters.prune_config import SPARSE_2_4_WARNING

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


# ------------------------------------------------------------------ the reference is the unpruned FP32 model


def _sparsified(src: Path, out: Path) -> Path:
    import onnx

    from edgeopt.converters.sparsity import sparsify

    onnx.save(sparsify(onnx.load(str(src)))[0], str(out))
    return out


def _top1(path: Path, ds) -> float:
    from edgeopt.runtime.run_fn import run_fn

    run = run_fn(path, threads=2)
    preds = [int(np.argmax(next(iter(run(f).values())))) for f in ds.feeds()]
    return 100.0 * float(np.mean(np.asarray(preds) == ds.labels))


@pytest.mark.onnxruntime
def test_int8_search_measures_against_the_unpruned_model(tmp_path):
    """The quantize stage gets the 2:4-sparsified model; its search's FP32 figure is the unpruned model's."""
    from edgeopt.converters.quantize import QdqStage

    calib, test = digits_datasets()
    pruned = _sparsified(DIGITS, tmp_path / "digits.sparse.onnx")
    spec = _stage(make_plan(load_profile("jetson-orin-nano"), backend="onnxruntime", precision="int8",
                            max_accuracy_drop=50, search_budget=3600), "qdq")
    (tmp_path / "art").mkdir()
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "art", reference_model=DIGITS, calib=calib,
                       eval=test, check_samples=test.subset(np.arange(8)), threads=2,
                       record=StageRecord("qdq", {}))
    QdqStage().run(Intermediate(pruned), spec.config, ctx)
    search, _ = test.split(spec.config.bound.search_fraction, seed=0)
    unpruned, sparse = _top1(DIGITS, search), _top1(pruned, search)
    assert unpruned != sparse  # 2:4 changed the digits it reads
    assert ctx.record.report["accuracy_aware"]["fp32"]["search"] == pytest.approx(unpruned)


@pytest.mark.onnxruntime
def test_a_gate_failed_by_2_4_says_so_and_names_the_flag(tmp_path):
    """MNIST CNN, 2:4 asked for: 97.2 % -> 77.2 % at FP32; the final gate's error blames the prune stage."""
    from edgeopt import convert

    with pytest.raises(GateFailedError) as e:
        convert(MNIST, "jetson-orin-nano", tmp_path / "out", precision="fp32", prune_mode="2:4",
                calib=DATA / "mnist_calib.npz", eval=DATA / "mnist_test.npz", max_accuracy_drop=2)
    err = e.value
    assert "the loss comes from the pruning stage" in err.message and "2:4 sparsity" in err.message
    assert "--prune-mode 2:4" in err.hint
    share = err.details["pruning"]
    assert share["drop"] > 2 and share["unpruned"] == pytest.approx(97.2)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_an_int8_search_failed_by_2_4_blames_the_prune_stage(tmp_path):
    """The issue's run: the INT8 search, now measured against the unpruned model, fails, and says why."""
    from edgeopt import convert

    with pytest.raises(GateFailedError) as e:
        convert(MNIST, "jetson-orin", tmp_path / "out", precision="int8", prune_mode="2:4", search_budget=5,
                calib=DATA / "mnist_calib.npz", eval=DATA / "mnist_test.npz", max_accuracy_drop=2)
    assert e.value.message.startswith("qdq: INT8 misses --max-accuracy-drop 2")
    assert "the loss comes from the pruning stage" in e.value.message and "--prune-mode 2:4" in e.value.hint


@pytest.mark.onnxruntime
def test_without_pruning_a_gate_failure_blames_no_pruning(tmp_path):
    from edgeopt.converters.prune_blame import blame_pruning

    plan = make_plan(load_profile("jetson-orin-nano"), backend="onnxruntime", precision="int8", max_accuracy_drop=1)
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path, reference_model=DIGITS)
    err = GateFailedError("gate failed: top1 drop 3 > 1", "relax the gate")
    assert blame_pruning(err, ctx, plan.options, digits_datasets()[1]) is err


# ------------------------------------------------------------------ the engine is built on the board


TRT = "TensorrtExecutionProvider"


@pytest.fixture(scope="module")
def jetson_artifact(tmp_path_factory):
    """The digits CNN converted for jetson-orin-nano (ONNX Runtime, FP32) by the real converter."""
    from edgeopt import convert

    out = tmp_path_factory.mktemp("jetson") / "digits-orin"
    convert(DIGITS, "jetson-orin-nano", out, precision="fp32", eval=DATA / "digits_test.npz")
    return out


@pytest.fixture
def runner_module(monkeypatch):
    from edgeopt.runtime.runners import onnxruntime as ort_runner

    monkeypatch.setattr(ort_runner, "_said", set())  # each test sees the runner's one line afresh
    return ort_runner


class FakeTensorrtProvider:
    """Stands in for ``onnxruntime.InferenceSession`` where the TensorRT execution provider would be (a Jetson):
    records the providers and options it is handed, says it took TensorRT (``loads=True``) or that TensorRT did not
    load (``loads=False``), and runs the model on ONNX Runtime's real CPU provider."""

    handed: list = []
    loads = True
    real_session = None  # ONNX Runtime's own InferenceSession, which runs the model

    def __init__(self, path, so=None, providers=None, **kwargs):
        type(self).handed.append(list(providers))
        self._cpu = type(self).real_session(path, so, providers=["CPUExecutionProvider"], **kwargs)
        names = [p[0] if isinstance(p, tuple) else p for p in providers]
        self._used = [n for n in names if n == "CPUExecutionProvider" or (n == TRT and self.loads)]
        options = next((p[1] for p in providers if isinstance(p, tuple) and p[0] == TRT), {})
        if self.loads and options.get("trt_engine_cache_enable"):  # TensorRT's EP writes its engine once
            engine = Path(options["trt_engine_cache_path"]) / "TensorrtExecutionProvider_TRTKernel_graph_0_sm87.engine"
            if not engine.exists():
                engine.write_bytes(b"fake engine")

    def get_providers(self):
        return self._used

    def __getattr__(self, name):
        return getattr(self._cpu, name)


def _fake_tensorrt(monkeypatch, loads=True):
    import onnxruntime as ort

    monkeypatch.setattr(FakeTensorrtProvider, "real_session", ort.InferenceSession)
    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "InferenceSession", FakeTensorrtProvider)
    monkeypatch.setattr(FakeTensorrtProvider, "handed", [])
    monkeypatch.setattr(FakeTensorrtProvider, "loads", loads)


@pytest.fixture
def fake_board(runner_module, monkeypatch, tmp_path):
    """TensorRT (faked) in this ONNX Runtime, and the device's work dir set as remote-bench sets it."""
    _fake_tensorrt(monkeypatch)
    monkeypatch.setenv("EDGEOPT_WORK_DIR", str(tmp_path / "work"))
    return tmp_path / "work"


def test_the_manifest_names_the_engine_build_on_the_board(jetson_artifact):
    import json

    runtime = json.loads((jetson_artifact / "manifest.json").read_text())["runtime"]
    s = runtime["settings"]
    assert s["provider"] == TRT and s["fallback_providers"] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert s["provider_options"]["trt_engine_cache_enable"] is True
    assert s["provider_options"]["trt_engine_cache_path"] == "{work_dir}/trt-engines"
    assert s["provider_options"]["trt_int8_enable"] is True  # the profile's own options are kept
    build = runtime["engine_build"]
    assert build["built_here"] is False and "on the device" in build["where"]
    assert build["cache"] == "{work_dir}/trt-engines" and "first run on the board" in build["when"]


@pytest.mark.onnxruntime
def test_the_runner_hands_tensorrt_its_engine_cache_in_the_work_dir(jetson_artifact, fake_board, capsys):
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(jetson_artifact)) as r:
        feed = {"input": np.load(DATA / "digits_test.npz")["input"][:1]}
        assert r.run(feed)["logits"].shape == (1, 10)
    (trt, options), cpu = FakeTensorrtProvider.handed[0]
    assert trt == TRT and cpu == "CPUExecutionProvider"  # CUDA is not in this (fake) build: not handed
    cache = str(fake_board / "trt-engines")
    assert options["trt_engine_cache_enable"] is True and options["trt_engine_cache_path"] == cache
    assert "trt_fp16_enable" not in options and Path(cache).is_dir()  # FP32 artifact: float layers judged at FP32
    assert r.provider == TRT and r.execution["engine_cache"] == cache and "why" not in r.execution
    assert "ran on" not in capsys.readouterr().err  # TensorRT ran: no fallback to say


@pytest.mark.onnxruntime
def test_the_first_run_builds_the_engine_and_the_next_loads_it(jetson_artifact, fake_board, capsys):
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(jetson_artifact)) as first:
        pass
    with open_runner(str(jetson_artifact)) as second:
        pass
    engine = "TensorrtExecutionProvider_TRTKernel_graph_0_sm87.engine"
    assert first.execution["engine"]["built_now"] and first.execution["engine"]["files"] == [engine]
    assert not second.execution["engine"]["built_now"] and second.execution["engine"]["files"] == [engine]
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("edgeopt runtime:")]
    assert len(said) == 1 and "built the TensorRT engine on this board" in said[0]
    assert str(fake_board / "trt-engines") in said[0]


@pytest.mark.onnxruntime
def test_without_the_env_the_cache_is_under_a_devices_default_work_dir(jetson_artifact, runner_module, monkeypatch,
                                                                       tmp_path):
    from edgeopt.runtime.runners import open_runner

    _fake_tensorrt(monkeypatch)
    monkeypatch.delenv("EDGEOPT_WORK_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    open_runner(str(jetson_artifact)).close()
    options = FakeTensorrtProvider.handed[0][0][1]
    assert options["trt_engine_cache_path"] == str(tmp_path / ".cache" / "edgeopt-remote" / "trt-engines")


@pytest.mark.onnxruntime
def test_here_the_runner_falls_back_to_the_cpu_and_says_so_once(jetson_artifact, runner_module, capsys):
    from edgeopt.runtime.runners import open_runner

    for _ in range(2):
        with open_runner(str(jetson_artifact)) as r:
            assert r.provider == "CPUExecutionProvider"
    assert r.execution["target_provider"] == TRT and "not in this ONNX Runtime" in r.execution["why"]
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("edgeopt runtime:")]
    assert said == [f"edgeopt runtime: onnxruntime ran on CPUExecutionProvider, not the artifact's {TRT}: "
                    f"{r.execution['why']}"]


@pytest.mark.onnxruntime
def test_a_tensorrt_that_does_not_load_is_named(jetson_artifact, runner_module, monkeypatch, capsys):
    from edgeopt.runtime.runners import open_runner

    _fake_tensorrt(monkeypatch, loads=False)
    with open_runner(str(jetson_artifact)) as r:
        assert r.provider == "CPUExecutionProvider" and "did not load" in r.execution["why"]
    assert "ran on CPUExecutionProvider, not the artifact's TensorrtExecutionProvider" in capsys.readouterr().err


@pytest.mark.onnxruntime
def test_the_validation_names_the_provider_that_checked_it(jetson_artifact, runner_module, monkeypatch):
    """Here: the CPU provider, for a TensorRT artifact, and why; where TensorRT runs (faked), TensorRT itself."""
    import json

    from edgeopt.validate import validate_artifact

    on = json.loads((jetson_artifact / "manifest.json").read_text())["validation"]["checked_on"]
    assert on["provider"] == "CPUExecutionProvider" and on["target"] == TRT and "not in this ONNX Runtime" in on["why"]
    _fake_tensorrt(monkeypatch)
    monkeypatch.setenv("EDGEOPT_WORK_DIR", str(jetson_artifact.parent / "work"))
    v = validate_artifact(jetson_artifact, jetson_artifact / "model.onnx", digits_datasets()[1], data_source="eval")
    assert v.checked_on.model_dump() == {"provider": TRT, "target": TRT, "why": None}


@pytest.mark.onnxruntime
def test_remote_bench_gives_the_runner_the_devices_work_dir(remote_env, jetson_artifact, tmp_path):
    """The run on the device is told its work dir (where the engine cache lives); what ran is in the result."""
    import sys

    from edgeopt.remote.bench import remote_bench
    from edgeopt.remote.inventory import make_device
    from edgeopt.remote.transport import LocalTransport

    class SeenTransport(LocalTransport):  # this machine as the device, keeping the commands it ran
        seen: list = []

        def run(self, argv, timeout, stream=None):
            self.seen.append(list(argv))
            return super().run(argv, timeout, stream)

    dev = make_device(name="orin", host="localhost", profile="jetson-orin-nano", python=sys.executable,
                      work_dir=str(tmp_path / "work"))
    tr = SeenTransport(dev.work_dir)
    res = remote_bench(dev, jetson_artifact, transport=tr, store=False, min_runs=3, min_seconds=0, warmup=1,
                       setup=False)
    bench = next(a for a in tr.seen if "edgeopt_runtime" in a)
    at = bench.index("env")
    assert bench[at:at + 3] == ["env", f"EDGEOPT_WORK_DIR={tr.work_dir}", sys.executable]
    assert any(w.startswith("onnxruntime ran on CPUExecutionProvider, not the artifact's") for w in res["warnings"])


# ------------------------------------------------------------------ small parts


def test_the_reference_is_the_normalized_model_unless_it_is_another_graph(tmp_path):
    import shutil

    import onnx

    pruned = shutil.copy(DIGITS, tmp_path / "digits.pruned.onnx")
    other = onnx.load(str(DIGITS))
    other.graph.output[0].name = other.graph.node[-1].output[0] = "embedding"
    onnx.save(other, str(tmp_path / "other.onnx"))
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path, reference_model=DIGITS)
    assert ctx.reference_for(pruned) == DIGITS  # same inputs and outputs: the unpruned model judges
    assert ctx.reference_for(tmp_path / "other.onnx") == tmp_path / "other.onnx"  # another graph: not a reference
    ctx.reference_model = tmp_path  # no file (a stage run on its own): its input is its reference
    assert ctx.reference_for(pruned) == Path(pruned)


@pytest.mark.parametrize("request_kw,flag,what", [
    ({"prune_mode": "2:4"}, "drop --prune-mode 2:4", "2:4 sparsity"),
    ({"prune": 0.3}, "--prune 0", "channel pruning (--prune 0.3)"),
    ({"prune": 0.3, "recover": False}, "drop --no-recover", "channel pruning (--prune 0.3)"),
])
def test_the_blame_names_the_flag_of_the_pruning_that_ran(request_kw, flag, what):
    from edgeopt.converters.prune_blame import turn_off_flag, what_pruned

    options = make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", **request_kw).options
    assert flag in turn_off_flag(options) and what_pruned(options).startswith(what)
