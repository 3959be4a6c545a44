"""Early-exit cuts placed by what each candidate prefix costs in the artifact's backend at the run's precision:
the backend's own timer where it has one, the FLOP/byte cost model (labelled estimated) where it has none, the
reference runtime when asked. No timings are asserted: costs are injected or estimated."""

from __future__ import annotations

from types import SimpleNamespace

import onnx
import pytest

from edgeopt.converters.early_exit import cuts as C
from edgeopt.converters.early_exit.prefix_cost import REFERENCE, prefix_cost
from edgeopt.converters.early_exit.stage import EarlyExitConfig
from edgeopt.data import load_npz
from edgeopt.enums import BackendName, CutCost

DIGITS = "fixtures/models/digits_cnn.onnx"


def _ctx(repo):
    return SimpleNamespace(calib=load_npz(repo / "fixtures/data/digits_calib.npz"))


def test_the_cuts_follow_the_cost_profile_they_are_given(repo, tmp_path):
    model = repo / DIGITS
    candidates = C.cut_candidates(onnx.load(str(model)))
    assert len(candidates) >= 3

    def nodes(path):
        return float(len(onnx.load(str(path)).graph.node))

    def by_nodes(paths):
        return [nodes(p) for p in paths]

    def front_loaded(paths):  # the early layers cost most: every prefix but the shortest costs nearly all
        return [nodes(p) if p == model else nodes(model) * (0.3 if p.name == "prefix0.onnx" else 0.9) for p in paths]

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    even, _ = C.place_cuts(model, candidates, (0.5,), tmp_path / "a", by_nodes)
    early, times = C.place_cuts(model, candidates, (0.5,), tmp_path / "b", front_loaded)
    assert candidates.index(early[0]) < candidates.index(even[0])
    assert times[early[0]] / times["full"] == pytest.approx(0.3)


@pytest.mark.onnxruntime
def test_a_backend_with_a_timer_costs_the_prefixes_itself(repo, tmp_path):
    config = EarlyExitConfig(backend=BackendName.ONNXRUNTIME, profile="host")
    cost = prefix_cost(config, _ctx(repo), {}, tmp_path)
    assert not cost.estimated and cost.what != REFERENCE and "onnxruntime" in cost.what


def test_a_backend_that_cant_be_timed_here_is_costed_by_the_estimated_cost_model(repo, tmp_path):
    config = EarlyExitConfig(backend=BackendName.TVM, profile="pi5", int8=True)
    cost = prefix_cost(config, _ctx(repo), {}, tmp_path)
    assert cost.estimated and cost.what.startswith("estimated") and "pi5" in cost.what and "int8" in cost.what
    model = repo / DIGITS
    first = C.cut_candidates(onnx.load(str(model)))[0]
    names = [i.name for i in onnx.load(str(model)).graph.input]
    prefix = C.extract(model, tmp_path / "prefix.onnx", names, [first])
    alone, full = cost.measure([prefix, model])
    assert 0 < alone < full


def test_reference_costs_are_kept_when_asked(repo, tmp_path):
    config = EarlyExitConfig(backend=BackendName.TVM, profile="pi5", cuts_by=CutCost.BY_REFERENCE)
    cost = prefix_cost(config, _ctx(repo), {}, tmp_path)
    assert cost.what == REFERENCE and not cost.estimated


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_a_prefix_the_backend_cant_convert_leaves_every_prefix_to_the_estimate(cli_in_process, monkeypatch, repo,
                                                                               tmp_path):
    import json

    from edgeopt.converters.early_exit import build
    from edgeopt.converters.early_exit.prefix_cost import PrefixCost
    from edgeopt.errors import StageError

    pytest.importorskip("torch")

    def cannot(path):
        raise StageError("the backend failed on this prefix", "none")

    monkeypatch.setattr(build, "prefix_cost", lambda config, ctx, feed, work: PrefixCost(cannot, "injected", False, 12))
    out = tmp_path / "ee"
    r = cli_in_process("convert", str(repo / DIGITS), "--profile", "host", "--backend", "onnxruntime", "--precision",
                       "fp32", "--early-exit", "auto", "--calib", str(repo / "fixtures/data/digits_calib.npz"),
                       "--eval", str(repo / "fixtures/data/digits_test.npz"), "--set", "early_exit.epochs=40",
                       "--set", "early_exit.timing_runs=3", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    report = next(s["report"] for s in manifest["stages"] if s["name"] == "early_exit")
    assert report["costs_estimated"] and "could not convert a prefix" in report["costed_with"]
    assert len(report["cuts"]) >= 1 and any("cuts are placed by the estimated" in w for w in json.loads(r.stdout)["warnings"])
