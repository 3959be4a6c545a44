"""edgeopt.metrics: each metric on real outputs (the bundled digits CNN, a per-position tagger and a
probability-map model built here), labels validated against the output, the user's metric import path,
and --metric through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_search import sequence_tagger, sequences

from edgeopt.data import Dataset, check_dataset, load_npz
from edgeopt.errors import BadDataError, BadInputError, ExitCode
from edgeopt.metrics import MetricSpec, ctc_decode, make_metric, metric_for_outputs, parse_metric_spec
from edgeopt.model import graph_inputs, load_onnx
from edgeopt.runtime.run_fn import run_fn

pytestmark = pytest.mark.onnxruntime
REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DIGITS_TEST = REPO / "fixtures" / "data" / "digits_test.npz"


@pytest.fixture(scope="module")
def digits():
    ds = check_dataset(load_npz(DIGITS_TEST), graph_inputs(load_onnx(DIGITS)), role="eval").subset(range(120))
    return run_fn(DIGITS, 2), ds


def noisy(run, scale: float, seed: int = 0):
    """``run`` with Gaussian noise on every output (a stand-in for a worse quantized model)."""
    rng = np.random.default_rng(seed)

    def go(feed):
        return {k: v + scale * rng.standard_normal(v.shape).astype(v.dtype) for k, v in run(feed).items()}

    return go


def with_labels(ds: Dataset, labels) -> Dataset:
    return Dataset(ds.arrays, labels, ds.source, ds.synthetic, ds.ranks)


def test_top1_with_and_without_labels_on_the_digits_cnn(digits):
    run, ds = digits
    m = make_metric(run, ds)
    assert m.name == "top1_accuracy" and m.unit == "%" and m.labels_used and 95 < m.fp32_value <= 100
    worse = m.score(noisy(run, 20.0), ds)
    assert worse < m.fp32_value
    outs = m.outputs(noisy(run, 20.0, seed=1), ds)  # cached outputs score the same as a fresh run
    assert m.score_outputs(outs) == m.score(noisy(run, 20.0, seed=1), ds)
    a = make_metric(run, with_labels(ds, None))
    assert a.name == "top1_agreement_with_fp32" and a.fp32_value == 100.0 and not a.labels_used


def test_one_hot_and_probability_labels_are_converted(digits):
    run, ds = digits
    ref = make_metric(run, ds).fp32_value
    one_hot = np.eye(10, dtype=np.float32)[ds.labels]
    assert make_metric(run, with_labels(ds, one_hot)).fp32_value == ref
    assert make_metric(run, with_labels(ds, one_hot * 0.8 + 0.02)).fp32_value == ref
    assert make_metric(run, with_labels(ds, ds.labels.astype(np.float64)[:, None])).fp32_value == ref


@pytest.mark.parametrize("labels, words", [
    (lambda y: np.array([str(v) for v in y]), "labels are strings"),
    (lambda y: y + 100, "out of range: [100, 101, 102, 103, 104] for a model with 10 classes"),
    (lambda y: y[:-3], "117 labels for 120 samples"),
    (lambda y: y + 0.5, "fractions"),
    (lambda y: (y + 1) % 10, "your labels don't match the model's outputs: FP32 scores"),
])
def test_bad_labels_are_one_line_exit_3(digits, labels, words):
    run, ds = digits
    with pytest.raises(BadDataError) as e:
        make_metric(run, with_labels(ds, labels(ds.labels)))
    assert e.value.exit_code == ExitCode.BAD_INPUT and words in e.value.message
    assert "\n" not in e.value.one_line()


def test_cosine_and_sqnr_in_db(digits):
    run, ds = digits
    c = make_metric(run, ds, MetricSpec(name="cosine"))
    assert c.name == "cosine_vs_fp32" and c.fp32_value == pytest.approx(100.0) and c.score(noisy(run, 1.0), ds) < 100
    s = make_metric(run, ds, MetricSpec(name="sqnr", min_sqnr_db=25))
    assert s.unit == "dB" and s.fp32_value == 25.0  # the reference is the target: drop = dB below it
    small, big = s.score(noisy(run, 0.01), ds), s.score(noisy(run, 1.0), ds)
    assert small > big and small - big == pytest.approx(40.0, abs=1.0)  # 100x the noise amplitude = 40 dB


def test_the_stages_checks_and_the_task_metrics_share_one_cosine_and_top1(digits):
    """converters/checks.py (every stage's check against its input) and the cosine and top-1 metrics judge the same
    outputs with the same definitions (edgeopt.metrics.kinds), so a stage's check and the gate never disagree."""
    import zlib

    from edgeopt.converters.checks import compare
    from edgeopt.metrics.kinds import cosine, top1_class

    run, ds = digits

    def worse(feed):  # the same noise for the same input, whoever runs it
        seed = zlib.crc32(b"".join(np.ascontiguousarray(v).tobytes() for v in feed.values()))
        return noisy(run, 20.0, seed=seed)(feed)

    feeds = ds.feeds()[:40]
    checked = compare(run, worse, feeds)
    pairs = [(run(f)["logits"], worse(f)["logits"]) for f in feeds]
    assert checked["cosine_min"] == min(cosine(a, b) for a, b in pairs)
    assert checked["top1_agreement"] == np.mean([top1_class(a) == top1_class(b) for a, b in pairs]) < 1.0
    m = make_metric(run, ds.subset(range(40)), MetricSpec(name="cosine"))
    assert m.score(worse, ds.subset(range(40))) == pytest.approx(100 * checked["cosine_mean"])
    top1 = make_metric(run, with_labels(ds.subset(range(40)), None))
    assert top1.score(worse, ds.subset(range(40))) == pytest.approx(100 * checked["top1_agreement"])
    assert cosine(np.zeros(3), np.zeros(3)) == 1.0 and cosine(np.zeros(3), np.ones(3)) == 0.0


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    d = tmp_path_factory.mktemp("tagger")
    protos = sequence_tagger(d / "tagger.onnx")
    ds, clusters = sequences(protos, 30, seed=3)
    return run_fn(d / "tagger.onnx", 2), ds, clusters


def test_per_position_agreement_along_the_class_axis(tagger):
    run, ds, clusters = tagger
    m = make_metric(run, ds)
    assert m.name == "per_position_agreement_with_fp32" and "axis 2 of [N,8,10]" in m.description
    assert 0 < m.score(noisy(run, 8.0), ds) < 100
    lab = make_metric(run, with_labels(ds, clusters))
    assert lab.name == "per_position_accuracy" and lab.fp32_value > 90
    ignored = np.where(np.arange(8) < 4, clusters, -1)  # -1: positions not judged
    assert make_metric(run, with_labels(ds, ignored)).fp32_value > 90
    with pytest.raises(BadDataError, match="out of range"):
        make_metric(run, with_labels(ds, clusters + 10))


def test_ctc_greedy_decoding_and_exact_match(tagger):
    y = np.zeros((6, 4))
    y[[0, 1, 2, 3, 4, 5], [1, 1, 0, 2, 2, 3]] = 1  # 1 1 _ 2 2 3 -> (1, 2, 3)
    assert ctc_decode(y, 1, 0) == (1, 2, 3) and ctc_decode(y, 1, 2) == (1, 0, 3)
    run, ds, _ = tagger
    m = make_metric(run, ds, MetricSpec(name="ctc"))
    assert m.name == "ctc_exact_match_vs_fp32" and m.fp32_value == 100.0 and m.score(noisy(run, 8.0), ds) < 100
    decoded = [ctc_decode(next(iter(run(f).values()))[0], 1, 0) for f in ds.feeds()]
    padded = np.full((len(ds), 9), -1, np.int64)  # labels: sequences padded with -1 (chosen automatically)
    for i, seq in enumerate(decoded):
        padded[i, :len(seq)] = seq
    auto = make_metric(run, with_labels(ds, padded))
    assert auto.name == "ctc_exact_match" and auto.fp32_value == 100.0
    with pytest.raises(BadInputError, match="--ctc-blank 10"):
        make_metric(run, ds, MetricSpec(name="ctc", ctc_blank=10))


def prob_map_model(path: Path) -> Path:
    """x[1,1,8,8] -> Conv 3x3 -> Sigmoid -> p[1,1,8,8]: a one-channel probability map (as DBNet's)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = np.random.default_rng(0).normal(size=(1, 1, 3, 3)).astype(np.float32)
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Sigmoid", ["c"], ["p"])],
                     "map", [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 8, 8])],
                     [h.make_tensor_value_info("p", T.FLOAT, [1, 1, 8, 8])], [nh.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def test_map_iou_thresholded(tmp_path):
    run = run_fn(prob_map_model(tmp_path / "map.onnx"))
    x = np.random.default_rng(1).standard_normal((10, 1, 1, 8, 8)).astype(np.float32)
    ds = Dataset({"x": x}, None, ranks={"x": 4})
    m = make_metric(run, ds)
    assert m.name == "map_iou_at_0.5_vs_fp32" and m.fp32_value == 100.0
    assert m.score(noisy(run, 0.3), ds) < 100
    m3 = make_metric(run, ds, MetricSpec(threshold=0.3))
    assert m3.name == "map_iou_at_0.3_vs_fp32"
    masks = np.stack([next(iter(run(f).values()))[0] > 0.5 for f in ds.feeds()])
    assert make_metric(run, with_labels(ds, masks.astype(np.uint8))).name == "map_iou_at_0.5"


def test_map_iou_counts_only_cells_where_fp32_is_sure():
    """A cell FP32 puts at 0.55 and a candidate at 0.45 is FP32's own coin-flip, not counted; a cell FP32 puts at
    0.7 and the candidate at 0.3 is an error; with labels every cell counts."""
    fp32 = np.zeros((2, 1, 4, 4), np.float32)
    fp32[0, 0, 0, :2] = 0.9   # sure, both agree
    fp32[0, 0, 1, 0] = 0.55   # unsure: the candidate flips it below
    fp32[1, 0, 0, :2] = 0.9
    fp32[1, 0, 1, 0] = 0.7    # sure: the candidate flips it below
    cand = fp32.copy()
    cand[0, 0, 1, 0], cand[1, 0, 1, 0] = 0.45, 0.3
    ds = Dataset({"x": np.arange(2, dtype=np.float32).reshape(2, 1, 1)}, None, ranks={"x": 1})

    def runner(maps):
        return lambda feed: {"p": maps[int(feed["x"].ravel()[0])][None]}

    m = make_metric(runner(fp32), ds)
    assert m.name == "map_iou_at_0.5_vs_fp32" and "where FP32 is sure" in m.description
    assert m.per_sample([m.digest(o) for o in m.outputs(runner(cand), ds)]).tolist() == pytest.approx([100.0, 200 / 3])
    labelled = make_metric(runner(fp32), with_labels(ds, (fp32 > 0.5).astype(np.uint8)))
    assert labelled.score(runner(cand), ds) == pytest.approx(100 * (2 / 3 + 2 / 3) / 2)


def test_ambiguous_class_axis_asks_for_metric_axis(tmp_path):
    def cube(feed):
        return {"y": np.ones((1, 6, 6, 6), np.float32)}

    ds = Dataset({"x": np.zeros((3, 1, 2), np.float32)}, None, ranks={"x": 2})
    with pytest.raises(BadInputError) as e:
        make_metric(cube, ds)
    assert "can't tell the class axis of output 'y' [N,6,6,6]" in e.value.message and "--metric-axis" in e.value.hint
    assert make_metric(cube, ds, MetricSpec(axis=1)).name == "per_position_agreement_with_fp32"


USER_METRIC = '''
import numpy as np

def score(outputs, labels):
    """% of samples whose top class is even (a metric a user might write)."""
    return 100.0 * float(np.mean([int(np.argmax(o["logits"])) % 2 == 0 for o in outputs]))

not_callable = 3
'''


def test_user_metric_imported_from_the_search_path(digits, tmp_path):
    run, ds = digits
    (tmp_path / "my_metrics.py").write_text(USER_METRIC)
    m = make_metric(run, ds, parse_metric_spec("my_metrics:score"), search_path=[tmp_path])
    assert m.name == "custom:my_metrics:score" and 0 < m.fp32_value < 100
    for bad, words in [("nope_mod:score", "cannot import 'nope_mod'"), ("my_metrics:scor", "did you mean 'score'"),
                       ("my_metrics:not_callable", "not callable")]:
        with pytest.raises(BadInputError) as e:
            make_metric(run, ds, parse_metric_spec(bad), search_path=[tmp_path])
        assert e.value.exit_code == ExitCode.BAD_INPUT and words in e.value.one_line()


def test_unknown_metric_name_is_a_usage_error():
    from edgeopt.errors import UsageError

    with pytest.raises(UsageError) as e:
        parse_metric_spec("ctcc")
    assert "'ctcc' is not a metric" in e.value.message and "did you mean 'ctc'" in e.value.hint


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("warning:")]


@pytest.mark.slow
def test_cli_metric_named_in_the_report_and_manifest_and_bad_labels(tmp_path, cli):
    z = np.load(DIGITS_TEST)
    x, y = z["input"][:400], z["labels"][:400]  # 400: enough to confirm a 1-point bound (376+)
    np.savez(tmp_path / "eval.npz", input=x, labels=np.eye(10, dtype=np.float32)[y])  # one-hot: converted
    out = tmp_path / "art"
    r = cli("convert", str(DIGITS), "-o", str(out), "--eval", str(tmp_path / "eval.npz"), "--metric", "top1",
            "--max-accuracy-drop", "1", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["validation"]
    assert v["metric"] == "top1_accuracy" and v["metric_basis"] == "labels" and v["accuracy_drop"] <= 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["validation"]["metric"] == "top1_accuracy"
    r = cli("inspect", str(out))
    assert r.returncode == 0 and "metric top1_accuracy (vs labels): FP32 " in r.stdout
    np.savez(tmp_path / "bad.npz", input=(x * 255).astype(np.uint8), labels=y + 100)
    r = cli("convert", str(DIGITS), "-o", str(tmp_path / "b"), "--eval", str(tmp_path / "bad.npz"))
    assert r.returncode == 3 and "out of range" in r.stderr and len(_errors(r.stderr)) == 1
    assert not (tmp_path / "b").exists()
    (tmp_path / "m.py").write_text(USER_METRIC)
    np.savez(tmp_path / "cast.npz", input=np.round(x).astype(np.int64), labels=y)
    r = cli("convert", str(DIGITS), "-o", str(tmp_path / "c"), "--eval", str(tmp_path / "cast.npz"),
            "--metric", "m:score", "--json", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["validation"]["metric"] == "custom:m:score"
    assert any("cast from int64 to float32" in w for w in s["warnings"])
    # the user metric's time is reported: the whole run's calls, the validation's among them
    assert s["metric_time"]["calls"] >= s["metric_time"]["validation"]["calls"] >= 2 and "metric_time" not in s["validation"]
    r = cli("convert", str(DIGITS), "-o", str(tmp_path / "d"), "--metric", "nowhere:score", cwd=str(tmp_path))
    assert r.returncode == 3 and "cannot import 'nowhere'" in r.stderr and len(_errors(r.stderr)) == 1


@pytest.mark.slow
def test_readme_metrics_section_runs_as_written(tmp_path):
    """The README's "Metrics" section: its my_metrics.py and every edgeopt command it shows (bash and text
    blocks), run as written in a folder like the tour's (the bundled MNIST CNN and its data)."""
    import re
    import shlex
    import shutil
    import subprocess
    import sys

    text = (REPO / "README.md").read_text()
    section = text[text.index("## Metrics\n"):]
    section = section[:section.index("\n## ", 5)]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "my_metrics.py").write_text(code)
    shutil.copy(REPO / "fixtures/models/mnist_cnn.onnx", tmp_path / "model.onnx")
    shutil.copy(REPO / "fixtures/data/mnist_calib.npz", tmp_path / "calib.npz")
    shutil.copy(REPO / "fixtures/data/mnist_test.npz", tmp_path / "test.npz")
    cmds = [line for block in re.findall(r"```(?:bash|text)\n(.*?)```", section, re.S)
            for line in block.splitlines() if line.startswith("edgeopt ")]
    assert len(cmds) == 3
    for cmd in cmds:
        argv = shlex.split(cmd)
        r = subprocess.run([sys.executable, "-m", "edgeopt", *argv[1:], "--json"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (cmd, r.stderr)
        if "--dry-run" in argv:  # the plan names the judged output's metric
            assert "logits" in json.dumps(json.loads(r.stdout)["metric"])
            continue
        v = json.loads(r.stdout)["validation"]
        want = "custom:my_metrics:score" if "my_metrics" in cmd else "top1_accuracy"
        assert v["metric"] == want and v["metric_basis"] == "labels" and v["metric_value"] > 90


def test_bench_table_names_the_accuracy_metric():
    from io import StringIO

    from rich.console import Console

    from edgeopt.bench.table import render, summary_row

    lat = {"p50": 1.0, "p90": 1.1, "p99": 1.2, "ci95_low": 0.9, "ci95_high": 1.05}
    row = {"name": "a", "backend": "onnxruntime", "precision": "int8", "latency_ms": lat, "runs": 30,
           "validation": {"accuracy": 97.5, "accuracy_drop": 0.5, "metric": "ctc_exact_match"}}
    assert summary_row(row)["metric"] == "ctc_exact_match"
    buf = StringIO()
    render(Console(file=buf, width=200), {"rows": [row]})
    assert "acc %: ctc_exact_match" in buf.getvalue()


@pytest.mark.slow
def test_pipeline_recipe_metric_imported_from_the_recipes_directory(tmp_path, cli):
    import shutil

    import yaml

    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(DIGITS, proj / "model.onnx")
    shutil.copy(DIGITS_TEST, proj / "test.npz")
    (proj / "my_metrics.py").write_text(USER_METRIC)
    recipe = {"model": {"path": "model.onnx"}, "data": {"eval": "test.npz"}, "metric": "top1",
              "targets": [{"name": "mine", "backend": "onnxruntime", "precision": "fp32", "metric": "my_metrics:score"},
                          {"name": "plain", "backend": "onnxruntime", "precision": "fp32"}]}
    (proj / "edgeopt.yaml").write_text(yaml.safe_dump(recipe))
    env = {"EDGEOPT_CACHE_DIR": str(tmp_path / "cache"), "EDGEOPT_DATA_DIR": str(tmp_path / "data")}
    r = cli("pipeline", "run", str(proj / "edgeopt.yaml"), "--bench", "none", "--json", env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    by_name = {t["name"]: t for t in json.loads(r.stdout)["targets"]}
    assert by_name["mine"]["validation"]["metric"] == "custom:my_metrics:score"
    assert by_name["plain"]["validation"]["metric"] == "top1_accuracy"
    recipe["targets"][0]["metric"] = {"name": "ctc", "ctc_blnk": 1}
    (proj / "edgeopt.yaml").write_text(yaml.safe_dump(recipe))
    r = cli("pipeline", "run", str(proj / "edgeopt.yaml"), "--bench", "none", env=env, cwd=str(tmp_path))
    assert r.returncode == 3 and "ctc_blnk" in r.stderr


def test_optimize_checks_labels_and_the_metric_path_before_any_build(tmp_path, cli):
    z = np.load(DIGITS_TEST)
    np.savez(tmp_path / "bad.npz", input=z["input"][:40], labels=z["labels"][:40] + 100)
    r = cli("optimize", str(DIGITS), "--eval", str(tmp_path / "bad.npz"), "--time-budget", "1", "--json")
    assert r.returncode == 3, r.stderr
    assert "out of range" in json.loads(r.stdout)["error"]["message"]
    r = cli("optimize", str(DIGITS), "--metric", "nowhere:score", "--time-budget", "1", cwd=str(tmp_path))
    assert r.returncode == 3 and "cannot import 'nowhere'" in r.stderr and len(_errors(r.stderr)) == 1
    r = cli("optimize", str(DIGITS), "--metric", "top-1", "--time-budget", "1")
    assert r.returncode == 2 and "did you mean 'top1'" in r.stderr


def rendered_lines_with_ctc_labels(rec_model: Path, n: int, seed: int = 3):
    """``n`` rendered English text lines for the PP-OCRv4 recogniser and their label sequences **by
    construction** (the model's own character table from its metadata: index + 1, blank 0, space last),
    padded with -1."""
    import onnx

    from fixtures.datasets import _sentence, cls_preprocess, render_text_line

    meta = {p.key: p.value for p in onnx.load(str(rec_model), load_external_data=False).metadata_props}
    chars = meta["character"].splitlines()
    index = {c: i + 1 for i, c in enumerate(chars)} | {" ": len(chars) + 1}
    rng = np.random.default_rng(seed)
    texts = [_sentence(rng, int(rng.integers(2, 4))) for _ in range(n)]
    x = np.stack([cls_preprocess(render_text_line(t, int(rng.integers(20, 34))), (3, 48, 320)) for t in texts])
    labels = np.full((n, max(map(len, texts))), -1, np.int64)
    for i, t in enumerate(texts):
        labels[i, :len(t)] = [index[c] for c in t]
    return x, labels


@pytest.mark.slow
@pytest.mark.realmodels
def test_real_ctc_recogniser_judged_by_exact_match_of_the_text(tmp_path, cli):
    from fixtures.real_models import FixtureMissing, package_dir

    root = package_dir("rapidocr_onnxruntime")
    rec = None if root is None else root / "models" / "ch_PP-OCRv4_rec_infer.onnx"
    if rec is None or not rec.is_file():
        pytest.skip(str(FixtureMissing("rapidocr-onnxruntime is not installed")))
    x, labels = rendered_lines_with_ctc_labels(rec, 16)
    run = run_fn(rec, 2)
    ds = Dataset({"x": x}, labels, ranks={"x": 4})
    m = make_metric(run, ds)  # padded sequences of another length than T: CTC, chosen automatically
    assert m.name == "ctc_exact_match" and m.fp32_value >= 90 and "blank 0" in m.description
    assert m.score(noisy(run, 3.0), ds) < m.fp32_value
    unlabelled = Dataset({"x": x}, None, ranks={"x": 4})
    auto = make_metric(run, unlabelled)  # without labels: FP32 emits the blank at most frames -> CTC vs FP32
    assert auto.name == "ctc_exact_match_vs_fp32" and auto.fp32_value == 100.0
    per_pos = make_metric(run, unlabelled, MetricSpec(name="position_agreement"))  # per position, not flattened
    assert "[N,40,6625]" in per_pos.description
    np.savez(tmp_path / "lines.npz", x=x, labels=labels)
    r = cli("convert", str(rec), "--precision", "fp32", "--backend", "onnxruntime", "--input-shape", "x=1x3x48x320",
            "--eval", str(tmp_path / "lines.npz"), "-o", str(tmp_path / "art"), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    v = json.loads(r.stdout)["validation"]
    assert v["metric"] == "ctc_exact_match" and v["metric_value"] == v["metric_reference"] >= 90
    shifted = np.where(labels > 0, labels % 6624 + 1, labels)  # every character off by one: FP32 reads 0 %
    np.savez(tmp_path / "wrong.npz", x=x, labels=shifted)
    r = cli("convert", str(rec), "--precision", "fp32", "--backend", "onnxruntime", "--input-shape", "x=1x3x48x320",
            "--eval", str(tmp_path / "wrong.npz"), "-o", str(tmp_path / "art2"))
    assert r.returncode == 3 and "your labels don't match the model's outputs: FP32 scores 0 %" in r.stderr


@pytest.mark.slow
def test_bench_of_a_model_judges_accuracy_by_the_named_metric(tmp_path, cli):
    z = np.load(DIGITS_TEST)
    np.savez(tmp_path / "eval.npz", input=z["input"][:50], labels=z["labels"][:50])
    env = {"EDGEOPT_CACHE_DIR": str(tmp_path / "cache"), "EDGEOPT_DATA_DIR": str(tmp_path / "data")}
    r = cli("bench", str(DIGITS), "--profile", "host", "--backends", "onnxruntime", "--precision", "fp32",
            "--eval", str(tmp_path / "eval.npz"), "--metric", "top1", "--runs", "10", "--min-seconds", "0.1",
            "--no-store", "--json", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["table"]
    assert {row["metric"] for row in rows} == {"top1_accuracy"} and all(row["accuracy"] > 90 for row in rows)


@pytest.mark.slow
def test_metric_reaches_the_accuracy_aware_search(tmp_path, cli):
    protos = sequence_tagger(tmp_path / "tagger.onnx")
    calib, _ = sequences(protos, 32, seed=1)
    ev, _ = sequences(protos, 120, seed=2)  # enough held back to confirm a 5-point bound
    np.savez(tmp_path / "calib.npz", x=calib.arrays["x"])
    np.savez(tmp_path / "eval.npz", x=ev.arrays["x"])
    r = cli("convert", str(tmp_path / "tagger.onnx"), "--backend", "onnxruntime", "--precision", "int8",
            "--calib", str(tmp_path / "calib.npz"), "--eval", str(tmp_path / "eval.npz"), "--metric", "ctc",
            "--max-accuracy-drop", "5", "--search-budget", "3600", "--quant-mode", "static", "-o", str(tmp_path / "art"),
            "--json")
    assert r.returncode in (0, 5), r.stderr[-2000:]
    out = json.loads(r.stdout)
    if r.returncode == 0:
        manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
        search = next(s["report"]["accuracy_aware"] for s in manifest["stages"] if "accuracy_aware" in s["report"])
        assert out["validation"]["metric"] == "ctc_exact_match_vs_fp32"
    else:
        search = out["error"]["details"]
    assert search["metric"] == "ctc_exact_match_vs_fp32"


def test_pipeline_accuracy_gate_names_the_metric_and_never_uses_random_inputs():
    from edgeopt.pipeline.gates import check
    from edgeopt.pipeline.recipe import Gates
    from edgeopt.validate import Validation

    v = Validation(samples=40, data_source="eval", synthetic=False, accuracy_drop=None, metric_drop=2.5,
                   metric="ctc_exact_match_vs_fp32", metric_unit="%")
    g = check(Gates(max_accuracy_drop=1.0), validation=v, bench=None, est=None, artifact_bytes=1)[0]
    assert g.value == 2.5 and not g.passed and "ctc_exact_match_vs_fp32 (no labels: vs FP32)" in g.source
    g = check(Gates(max_accuracy_drop=1.0), validation=v.model_copy(update={"synthetic": True}), bench=None, est=None,
              artifact_bytes=1)[0]
    assert g.value is None and not g.passed
    labelled = v.model_copy(update={"accuracy_drop": 0.5, "metric": "top1_accuracy"})
    g = check(Gates(max_accuracy_drop=1.0), validation=labelled, bench=None, est=None, artifact_bytes=1)[0]
    assert g.passed and g.value == 0.5 and g.source.endswith("top1_accuracy")


def test_api_convert_takes_the_metric(tmp_path):
    from edgeopt import api as edgeopt

    z = np.load(DIGITS_TEST)
    np.savez(tmp_path / "eval.npz", input=z["input"][:40], labels=z["labels"][:40])
    res = edgeopt.convert(str(DIGITS), "host", tmp_path / "art", precision="fp32", backend="onnxruntime",
                          eval=tmp_path / "eval.npz", metric={"name": "sqnr", "min_sqnr_db": 60})
    v = res.validation
    assert v.metric == "sqnr_db_vs_fp32" and v.metric_unit == "dB" and v.metric_reference == 60
    assert v.gates["min_sqnr_db"].passed and v.metric_value >= 60  # FP32 ORT vs FP32 ORT: identical


@pytest.mark.slow
def test_sqnr_gate_in_db_on_int8(tmp_path):
    from edgeopt import api as edgeopt  # (`edgeopt.convert` is shadowed by the module once it is imported)
    from edgeopt.errors import GateFailedError

    z = np.load(DIGITS_TEST)
    np.savez(tmp_path / "eval.npz", input=z["input"][:40])
    np.savez(tmp_path / "calib.npz", input=z["input"][100:164])
    kw = {"precision": "int8", "backend": "onnxruntime", "eval": tmp_path / "eval.npz", "calib": tmp_path / "calib.npz"}
    with pytest.raises(GateFailedError) as e:
        edgeopt.convert(str(DIGITS), "host", tmp_path / "a", metric={"name": "sqnr", "min_sqnr_db": 80}, **kw)
    assert "< --min-sqnr-db 80" in e.value.message and not (tmp_path / "a").exists()
    got = e.value.details["validation"]["metric_value"]
    assert 5 < got < 80  # INT8 of a small CNN: tens of dB
    res = edgeopt.convert(str(DIGITS), "host", tmp_path / "b", metric={"name": "sqnr", "min_sqnr_db": got - 1}, **kw)
    assert res.validation.gates["min_sqnr_db"].passed


def test_scoring_a_run_keeps_only_what_each_metric_needs():
    """score(run, ds) streams: per sample it keeps the metric's digest (a CTC reading, an argmax, a mask, the
    judged output), never every output (a recogniser's [1,40,6625] logits are ~1 MB a sample)."""
    from edgeopt.metrics import metric_for_outputs

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 1, 12, 20)).astype(np.float32)
    logits[..., 0] += 4.0  # peaky: the blank wins at most positions
    outs = [{"logits": x, "other": np.zeros((1, 1000), np.float32)} for x in logits]
    ds = Dataset({"i": np.arange(6, dtype=np.float32)}, ranks={"i": 0})

    def run(feed):
        return outs[int(feed["i"])]

    kinds = {"ctc": tuple, "position_agreement": np.ndarray, "cosine": np.ndarray}
    for name, kind in kinds.items():
        m = metric_for_outputs(outs, None, MetricSpec(name=name))
        d = m.digest(outs[0])
        assert isinstance(d, kind) and not isinstance(d, dict)
        assert m.score(run, ds) == m.score_outputs(outs) == pytest.approx(m.fp32_value)
    assert metric_for_outputs(outs, None, MetricSpec(name="position_agreement")).digest(outs[0]).shape == (12,)


def _frames(rng, n: int, t: int, c: int, blank_share: float, run: int) -> list[dict]:
    """``n`` one-hot-ish [1,t,c] outputs: the blank at ``blank_share`` of the frames, the rest runs of ``run``
    frames of one random non-blank class (a peaky CTC output at run 1, a frame-wise tagger at longer runs)."""
    outs = []
    for _ in range(n):
        seq, i = np.zeros(t, np.int64), 0
        while i < t:
            if rng.random() < blank_share:
                i += 1
                continue
            seq[i:i + run] = rng.integers(1, c)
            i += run
        logits = np.full((1, t, c), -5.0, np.float32)
        logits[0, np.arange(t), seq] = 5.0
        outs.append({"logits": logits})
    return outs


def test_dense_ctc_lines_are_told_by_their_peaky_output_not_a_blank_majority():
    """PP-OCRv4's recogniser on dense rendered lines emits the blank at 0.47-0.53 of the frames, so the old rule
    (half or more) flipped the run's metric between CTC and per-position from one data split to the next."""
    from edgeopt.metrics import looks_like_ctc, metric_for_outputs

    rng = np.random.default_rng(0)
    dense = _frames(rng, 24, 40, 6625, 0.4, 1)  # characters one frame each, the blank at ~40 % of frames
    assert looks_like_ctc([o["logits"][0] for o in dense])
    assert metric_for_outputs(dense, None).name == "ctc_exact_match_vs_fp32"
    tagger = _frames(rng, 24, 40, 6625, 0.4, 4)  # the same share, but classes held for 4 frames: per position
    assert not looks_like_ctc([o["logits"][0] for o in tagger])
    assert metric_for_outputs(tagger, None).name != "ctc_exact_match_vs_fp32"
    few_tags = _frames(rng, 24, 40, 9, 0.4, 1)  # a handful of tags (NER-like) is not an alphabet
    assert not looks_like_ctc([o["logits"][0] for o in few_tags])


def _detector_outputs(rng, n: int) -> list[dict]:
    """``n`` samples of a detector's two outputs: class scores [1,50,12] and box coordinates [1,50,4]."""
    return [{"scores": rng.standard_normal((1, 50, 12)).astype(np.float32),
             "boxes": rng.uniform(0, 300, (1, 50, 4)).astype(np.float32)} for _ in range(n)]


def test_a_model_with_several_outputs_is_judged_on_every_output_and_the_worst_counts():
    """PicoDet's boxes were never judged (only its first output, scores): an INT8 that breaks the boxes must be
    caught. Without labels or flags every output gets its own metric vs FP32 and the worst one counts; labels, a
    metric flag or --metric-output still judge one output."""
    from edgeopt.metrics import MetricName, metric_for_outputs

    rng = np.random.default_rng(3)
    fp32 = _detector_outputs(rng, 8)
    m = metric_for_outputs(fp32, None)
    assert m.kind == MetricName.ALL_OUTPUTS and m.fp32_value == pytest.approx(100.0)
    assert "'scores' per_position_agreement_with_fp32" in m.description and "'boxes'" in m.description
    boxes_off = [{"scores": o["scores"], "boxes": o["boxes"][..., ::-1].copy()} for o in fp32]
    scores_off = [{"scores": -o["scores"], "boxes": o["boxes"]} for o in fp32]
    first_only = metric_for_outputs(fp32, None, MetricSpec(name="position_agreement"))
    assert first_only.score_outputs(boxes_off) == pytest.approx(100.0)  # the first output alone misses it
    assert m.score_outputs(boxes_off) < 99.0 and m.score_outputs(scores_off) < 99.0
    assert m.score_outputs(fp32) == pytest.approx(100.0)

    labels = np.stack([np.argmax(o["scores"][0], axis=-1) for o in fp32])
    assert metric_for_outputs(fp32, labels).kind == MetricName.POSITION_AGREEMENT
    assert metric_for_outputs(fp32, None, MetricSpec(output="boxes")).output == "boxes"
    asked = metric_for_outputs(fp32, None, MetricSpec(name="all_outputs"))
    assert asked.kind == MetricName.ALL_OUTPUTS and asked.score_outputs(boxes_off) == m.score_outputs(boxes_off)


def test_all_outputs_leaves_out_an_output_no_metric_fits_and_says_so_when_none_does():
    from edgeopt.metrics import MetricName, metric_for_outputs

    rng = np.random.default_rng(4)
    state = [{"p": rng.uniform(0, 1, (1, 1)).astype(np.float32),
              "state": rng.standard_normal((2, 1, 7, 128)).astype(np.float32)} for _ in range(6)]
    m = metric_for_outputs(state, None)  # the state [2,1,7,128] has no class axis to tell: only p is judged
    assert m.kind == MetricName.TOP1 and m.output == "p"
    only_state = [{"state": o["state"]} for o in state]
    with pytest.raises(BadInputError, match="no output of the model can be judged"):
        metric_for_outputs(only_state, None, MetricSpec(name="all_outputs"))


def _two_output_model(path: Path) -> Path:
    """x [1,16] -> MatMul -> 'scores' [1,12] and MatMul -> 'boxes' [1,4]: a detector's two heads in miniature."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 12)).astype(np.float32), "w_scores"),
             numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w_boxes")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w_scores"], ["scores"]), helper.make_node("MatMul", ["x", "w_boxes"], ["boxes"])],
        "two_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 12]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_convert_validates_a_two_output_model_on_both_outputs(tmp_path, cli):
    """The artifact's validation keeps every output when the metric judges them all (it kept only the first)."""
    model = _two_output_model(tmp_path / "heads.onnx")
    np.savez(tmp_path / "ev.npz", x=np.random.default_rng(1).standard_normal((20, 16)).astype(np.float32))
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32",
            "--eval", str(tmp_path / "ev.npz"), "-o", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads((tmp_path / "out" / "manifest.json").read_text())["validation"]
    assert v["metric"] == "worst_of_2_outputs_vs_fp32" and v["metric_kind"] == "all_outputs"
    assert "'scores' top1_agreement_with_fp32" in v["metric_description"] and "'boxes'" in v["metric_description"]
    assert v["metric_drop"] == pytest.approx(0.0)


def test_a_user_metric_module_of_the_same_name_in_another_directory_is_the_one_used(tmp_path):
    """Two runs in one process (API users, in-process CLI calls), each with its own my_metrics.py: the second run's
    file is imported, not the module the first left in sys.modules."""
    from edgeopt.metrics.custom import load_callable

    for name, body in (("a", "def first(outputs, labels):\n    return 1.0\n"),
                       ("b", "def second(outputs, labels):\n    return 2.0\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "edgeopt_test_metric_mod.py").write_text(body)
    assert load_callable("edgeopt_test_metric_mod:first", [tmp_path / "a"])(None, None) == 1.0
    assert load_callable("edgeopt_test_metric_mod:second", [tmp_path / "b"])(None, None) == 2.0


def test_worst_part_names_the_output_that_sets_a_worst_of_figure():
    from edgeopt.metrics.all_outputs import worst_part

    rng = np.random.default_rng(3)
    scores, boxes = rng.standard_normal((30, 12)), rng.uniform(0, 100, (30, 4))
    outs = [{"scores": scores[i:i + 1], "boxes": boxes[i:i + 1]} for i in range(30)]
    m = metric_for_outputs(outs, None)
    moved = [{"scores": scores[i:i + 1], "boxes": boxes[i:i + 1] + 20.0} for i in range(30)]
    assert worst_part(m, [m.digest(o) for o in moved]).startswith("'boxes' relative_error_vs_fp32")
    assert worst_part(m, [m.digest(o) for o in moved[:5]]) == ""  # digests of another set: nothing said
    assert worst_part(m.parts[0], [m.parts[0].digest(o) for o in outs]) == ""  # one output: nothing to name


@pytest.mark.slow
def test_an_int8_gate_failure_on_several_outputs_names_the_worst_one(tmp_path, cli):
    """exit 5 on a model judged by all its outputs says which output's drop set the figure, so a user knows which
    head INT8 hurts (or which output to judge otherwise with --metric OUTPUT=KIND)."""
    model = _two_output_model(tmp_path / "heads.onnx")
    x = np.random.default_rng(1).standard_normal((60, 16)).astype(np.float32)
    np.savez(tmp_path / "ev.npz", x=x)
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
            "--calib", str(tmp_path / "ev.npz"), "--eval", str(tmp_path / "ev.npz"), "--max-accuracy-drop", "0.01",
            "--metric", "scores=relative_error", "--search-budget", "5", "-o", str(tmp_path / "out"))
    assert r.returncode == 5, r.stderr
    assert "the worst output: '" in r.stderr and "vs FP32" in r.stderr
    assert not (tmp_path / "out").exists()
