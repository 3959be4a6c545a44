"""The ``recover`` stage: distillation of a channel-pruned digits CNN from its FP32 model, on real data.

The student is trained on ``digits_calib`` (256 real 8x8 digits); every accuracy judged here is on
``digits_test`` (540 other digits), which recovery never sees.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgeopt.converters.base import ChainContext, Intermediate
from edgeopt.converters.prune_channels import prune_channels
from edgeopt.converters.prune_config import PruneConfig
from edgeopt.converters.recover import Recover, RecoverConfig, train_extra_missing
from edgeopt.converters.registry import get_stage
from edgeopt.data import load_data
from edgeopt.model import graph_inputs, load_onnx
from edgeopt.profiles import load_profile
from edgeopt.runtime.run_fn import run_fn
from fixtures import fixture_data, fixture_model

pytestmark = pytest.mark.onnxruntime
needs_train = pytest.mark.skipif(train_extra_missing() is not None, reason="needs the train extra (edgeopt[train])")

RATIO = 0.5  # cuts the digits CNN's FLOPs by 74 %: top-1 on digits_test falls from 99.4 % to about 37 %


def _data(name, model):
    return load_data(fixture_data(name), graph_inputs(load_onnx(model)), role="calib")


def _accuracy(path, ds) -> float:
    run = run_fn(path)
    pred = [int(np.argmax(next(iter(run(f).values())))) for f in ds.feeds()]
    return float(np.mean(np.array(pred) == ds.labels) * 100)


def _pruned(tmp_path):
    import onnx

    src = fixture_model("digits_cnn")
    calib = _data("digits_calib", src)
    model, report = prune_channels(load_onnx(src), PruneConfig(ratio=RATIO), calib.feeds(64))
    out = tmp_path / "digits.pruned.onnx"
    onnx.save(model, str(out))
    return src, out, calib, report


def _recover(tmp_path, config: RecoverConfig, calib=None):
    src, pruned, data, _ = _pruned(tmp_path)
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "artifact",
                       reference_model=src, calib=calib or data, threads=2)
    out = Recover().run(Intermediate(pruned), config, ctx)
    return src, pruned, out, ctx


@pytest.fixture(scope="module")
def recovered(tmp_path_factory):
    if train_extra_missing():
        pytest.skip("needs the train extra (edgeopt[train])")
    tmp = tmp_path_factory.mktemp("recover")
    return _recover(tmp, RecoverConfig(max_epochs=8, patience=8, budget_s=120))


def test_registered_as_a_stage():
    assert get_stage("recover") is Recover


@needs_train
@pytest.mark.slow
def test_recovery_improves_the_pruned_digits_cnn_on_data_it_never_saw(recovered):
    src, pruned, out, ctx = recovered
    test = _data("digits_test", src)
    before, after, fp32 = _accuracy(pruned, test), _accuracy(out.path, test), _accuracy(src, test)
    assert out.path != pruned and ctx.record.report["changed"] is True
    assert after >= before + 30, (before, after, fp32)  # 37 % -> about 90 % in 8 epochs
    r = ctx.record.report
    assert r["held_metric_recovered"] > r["held_metric_pruned"]
    assert r["labels_used"] and r["loss"] == "kl+ce" and r["metric"] == "top1_accuracy"
    assert [h["epoch"] for h in r["history"]] == list(range(r["epochs"] + 1))
    assert r["teacher_torch_vs_reference"]["max_abs_err"] < 1e-4
    assert r["versions"]["onnx2torch"] and r["versions"]["torch"]


@needs_train
@pytest.mark.slow
def test_exported_student_matches_its_torch_version(recovered):
    import onnx2torch
    import torch

    _, _, out, ctx = recovered
    assert ctx.record.checks["export_vs_torch"]["max_abs_err"] < 1e-4
    student = onnx2torch.convert(str(out.path)).eval()  # the exported file, read back into torch independently
    x = _data("digits_test", out.path).arrays["input"][:16]
    run = run_fn(out.path)
    with torch.no_grad():
        for i in range(len(x)):
            t = student(torch.from_numpy(x[i : i + 1])).numpy()
            o = next(iter(run({"input": x[i : i + 1]}).values()))
            assert np.max(np.abs(t - o)) < 1e-4


@needs_train
@pytest.mark.slow
def test_unlabelled_data_is_enough(tmp_path):
    src = fixture_model("digits_cnn")
    calib = _data("digits_calib", src)
    calib.labels = None
    _, pruned, out, ctx = _recover(tmp_path, RecoverConfig(max_epochs=6, patience=6), calib)
    r = ctx.record.report
    assert not r["labels_used"] and r["loss"] == "kl" and r["metric_basis"] == "fp32"
    test = _data("digits_test", src)
    assert _accuracy(out.path, test) >= _accuracy(pruned, test) + 20


@needs_train
@pytest.mark.slow
def test_budget_stops_training_and_keeps_the_best_student(tmp_path):
    # 2000 epochs take minutes even on an idle machine: 4 s stop it whatever the load
    _, pruned, out, ctx = _recover(tmp_path, RecoverConfig(max_epochs=2000, patience=2000, budget_s=4))
    r = ctx.record.report
    assert r["stopped"] == "budget" and r["epochs"] < 2000
    best = max(h["held_metric"] for h in r["history"])
    assert r["held_metric_recovered"] == best
    assert r["history"][r["best_epoch"]]["held_metric"] == best
    if r["best_epoch"] == 0:
        assert out.path == pruned  # nothing better than the pruned model: it is kept


@needs_train
@pytest.mark.slow
def test_simulated_ctrl_c_keeps_the_best_student_so_far(tmp_path):
    """Ctrl-C is simulated by raising KeyboardInterrupt from the per-epoch hook (as the signal would, mid-loop)."""
    import copy
    import time

    import onnx2torch
    import torch

    from edgeopt.converters import recover_train

    src, pruned, calib, _ = _pruned(tmp_path)
    config = RecoverConfig(max_epochs=40, patience=40, seed=0)
    student, teacher = onnx2torch.convert(str(pruned)), onnx2torch.convert(str(src))
    job = recover_train.Job.make(torch, teacher, student, pruned, src, calib, config)
    states = {}

    def interrupt_at_4(epoch, value):
        states[epoch] = (value, copy.deepcopy(student.state_dict()))
        if epoch == 4:
            raise KeyboardInterrupt

    res = recover_train.distill(torch, job, teacher, student, config, time.perf_counter() + 300, on_epoch=interrupt_at_4)
    assert res.stopped == "interrupted" and res.epochs == 4
    assert res.best_value == max(h["held_metric"] for h in res.history)
    student.load_state_dict(res.best_state)
    assert job.score(torch, student)[0] == res.best_value


def test_missing_train_extra_exits_4_simulated_by_hiding_onnx2torch(tmp_path):
    """onnx2torch is hidden from the import system (sys.modules entry None), as if not installed."""
    code = ("import sys; sys.modules['onnx2torch'] = None; from edgeopt.cli import main; sys.argv[0] = 'edgeopt'; "
            "sys.exit(main())")
    args = ["convert", str(fixture_model("digits_cnn")), "--profile", "host", "--backend", "onnxruntime",
            "--precision", "fp32", "--prune", "0.3", "--recover", "--calib", str(fixture_data("digits_calib")),
            "-o", str(tmp_path / "out"), "--json"]
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 4, p.stderr
    err = json.loads(p.stdout)["error"]
    assert "onnx2torch" in err["message"] and "edgeopt[train]" in err["hint"]
    assert not (tmp_path / "out").exists()


def test_without_the_train_extra_pruning_runs_unrecovered_and_says_so():
    """The plan is made as if onnx2torch were not installed (train_extra_missing patched: a fake)."""
    code = ("import sys; sys.modules['onnx2torch'] = None; from edgeopt.plan import make_plan; "
            "from edgeopt.profiles import load_profile; "
            "p = make_plan(load_profile('host'), backend='onnxruntime', precision='fp32', prune=0.3); "
            "print([s.name for s in p.stages]); print(p.warnings[-1])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    stages, warning = p.stdout.strip().splitlines()
    assert "recover" not in stages and "edgeopt[train]" in warning


@needs_train
@pytest.mark.slow
def test_convert_with_recovery_end_to_end(cli, tmp_path):
    out = tmp_path / "digits-pruned"
    r = cli("convert", str(fixture_model("digits_cnn")), "--profile", "host", "--backend", "onnxruntime",
            "--precision", "fp32", "--prune", "0.5", "--recover-budget", "60",
            "--calib", str(fixture_data("digits_calib")), "--eval", str(fixture_data("digits_test")),
            "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert [s["name"] for s in res["stages"]] == ["normalize", "prune", "recover", "onnxruntime"]
    assert res["validation"]["accuracy"] >= 85  # unrecovered: about 37 %
    rec = next(s for s in json.loads((out / "manifest.json").read_text())["stages"] if s["name"] == "recover")
    assert rec["report"]["changed"] and rec["checks"]["export_vs_torch"]["max_abs_err"] < 1e-4


# ------------------------------------------------------------------ channel rounding and measured speed (prune)


@pytest.mark.parametrize("profile,backend,precision,multiple", [
    ("x86-avx512", "onnxruntime", "fp32", 16),
    ("pi5", "tflite", "int8", 8),
    ("pi5", "onnxruntime", "fp32", 4),
    ("jetson-orin-nano", "onnxruntime", "int8", 16),  # TensorRT: tensor-core INT8 tiles
    ("jetson-orin-nano", "tvm", "fp16", 8),  # TVM's CUDA target
    ("jetson-orin-nano", "tflite", "int8", 8),  # XNNPACK on the Arm cores
])
def test_round_to_comes_from_the_profiles_unit_for_the_backend(profile, backend, precision, multiple):
    from edgeopt.converters.prune import channel_multiple

    prof = load_profile(profile)
    target = next(b for b in prof.backends if b.name.value == backend)
    n, why = channel_multiple(prof, dict(target.settings), precision)
    assert n == multiple and why


def test_plan_rounds_kept_channels_to_the_hosts_simd_width():
    from edgeopt.converters.prune import channel_multiple
    from edgeopt.plan import make_plan

    prof = load_profile("host")
    want, _ = channel_multiple(prof, dict(prof.backend("onnxruntime").settings), "fp32")
    plan = make_plan(prof, backend="onnxruntime", precision="fp32", prune=0.3, recover=False)
    prune = next(s for s in plan.stages if s.name == "prune").config
    assert prune.round_to == want and prune.round_to_reason
    assert [s.name for s in plan.stages] == ["normalize", "prune", "onnxruntime"]


def test_prune_report_times_the_pruned_model_against_the_unpruned(tmp_path):
    from edgeopt.converters.prune import Prune

    src = fixture_model("digits_cnn")
    calib = _data("digits_calib", src)
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "a",
                       reference_model=src, calib=calib, check_samples=calib.subset([0, 1]), threads=1)
    Prune().run(Intermediate(src), PruneConfig(ratio=0.5, round_to=8), ctx)
    lat = ctx.record.report["latency"]
    assert set(lat["latency_ms"]) == {"unpruned", "pruned"} and all(v > 0 for v in lat["latency_ms"].values())
    assert lat["speedup"] == pytest.approx(lat["latency_ms"]["unpruned"] / lat["latency_ms"]["pruned"], rel=1e-2)
    assert "estimate" in lat["note"]
    assert ("warning" in lat) == (lat["speedup"] < 1.05)  # a prune that is not faster says so


@pytest.mark.openvino
def test_prune_latency_runs_on_the_plans_backend_when_it_can(tmp_path):
    from edgeopt.converters.prune import Prune

    src = fixture_model("digits_cnn")
    calib = _data("digits_calib", src)
    for backend, runtime in (("openvino", "openvino CPU"), ("tflite", "onnxruntime")):
        ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "a",
                           reference_model=src, calib=calib, check_samples=calib.subset([0, 1]), threads=1)
        Prune().run(Intermediate(src), PruneConfig(ratio=0.5, round_to=8, latency_backend=backend), ctx)
        lat = ctx.record.report["latency"]
        assert lat["runtime"].startswith(runtime) and lat["backend"] == backend and lat["latency_ms"]["pruned"] > 0
        assert ("stands in" in lat["note"]) == (backend == "tflite")  # not the plan's backend: said


def test_validation_on_the_data_recovery_trained_on_is_noticed():
    from edgeopt.chain import check_samples
    from edgeopt.converters.recover import _validates_on_calib

    src = fixture_model("digits_cnn")
    calib, test = _data("digits_calib", src), _data("digits_test", src)

    def ctx(val):
        return ChainContext(work_dir=".", artifact_dir=".", reference_model=src, calib=calib,
                            check_samples=check_samples(val))

    assert _validates_on_calib(ctx(calib))  # fp32 without --eval: the chain validates on --calib itself
    assert not _validates_on_calib(ctx(test))


def test_recipes_turn_recovery_off_or_set_its_budget(tmp_path):
    from edgeopt.errors import BadInputError
    from edgeopt.pipeline.recipe import Gates, Target
    from edgeopt.pipeline.run import plan_recipe
    from edgeopt.plan import make_plan

    prof = load_profile("host")
    (tmp_path / "r.yaml").write_text("prune: 0.3\nrecover: false\n")
    plan = make_plan(prof, backend="onnxruntime", precision="fp32", recipe=tmp_path / "r.yaml")
    assert "recover" not in [s.name for s in plan.stages]
    if train_extra_missing() is None:
        r = plan_recipe(Target(name="t", prune=0.3, recover_budget=30), Gates())
        stages = {s.name: s.config for s in make_plan(prof, backend="onnxruntime", precision="fp32", recipe=r).stages}
        assert stages["recover"].budget_s == 30
        (tmp_path / "typo.yaml").write_text("prune: 0.3\nrecovr: false\n")
        with pytest.raises(BadInputError, match="unknown key 'recovr'") as err:
            make_plan(prof, backend="onnxruntime", precision="fp32", recipe=tmp_path / "typo.yaml")
        assert "recover" in err.value.hint


def test_recover_without_channel_pruning_says_it_does_nothing():
    from edgeopt.plan import make_plan

    plan = make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", recover=True)
    assert "recover" not in [s.name for s in plan.stages]
    assert any("--recover does nothing" in w for w in plan.warnings)


def test_export_check_allows_summation_noise_of_deep_nets_not_a_wrong_output():
    """PP-OCRv4's DBNet student exported fine but differed from torch by 0.0025 on single pixels of its 320x320
    map (summation order): same direction to 1e-5 passes; a real export error (a shifted output) does not."""
    from edgeopt.converters.recover import export_matches

    assert export_matches({"max_abs_err": 5e-4, "cosine_min": 0.99}, scale=1.0)  # within the plain tolerance
    assert export_matches({"max_abs_err": 2.5e-3, "cosine_min": 0.9999993}, scale=1.0)
    assert not export_matches({"max_abs_err": 2.5e-3, "cosine_min": 0.9995}, scale=1.0)
    assert not export_matches({"max_abs_err": 0.05, "cosine_min": 0.999999}, scale=1.0)  # too far, however aligned
    assert not export_matches({"max_abs_err": 2.5e-3, "cosine_min": None}, scale=1.0)
