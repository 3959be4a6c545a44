"""Every flag honoured or refused, every message true: a user's metric must return a finite real
number, flags that can't apply are refused before any work (``edgeopt.applicability``, the same check in
``--dry-run``), messages that point the right way, and the early exit classes. Each case at the CLI: its exit
code, one ``edgeopt: error:`` line, no traceback, no output left behind, one valid JSON object."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fixtures_convert import conv_bn_model

from edgeopt.errors import BadInputError
from edgeopt.metrics import MetricName, MetricSpec, metric_for_outputs
from edgeopt.metrics.custom import checked_value

pytestmark = pytest.mark.onnxruntime
REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DIGITS_TEST = REPO / "fixtures" / "data" / "digits_test.npz"
DIGITS_CALIB = REPO / "fixtures" / "data" / "digits_calib.npz"


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def refused(r, code: int, *words: str) -> str:
    """The run ended with ``code``, one error line holding ``words``, no traceback; with --json one object."""
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("edgeopt: error:")]
    assert r.returncode == code, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    if r.stdout.strip():
        out = json.loads(r.stdout)
        assert out["ok"] is False and out["error"]["exit_code"] == code
    return lines[0]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A user's folder: the digits CNN, its data and a module of metrics."""
    shutil.copy(DIGITS, tmp_path / "model.onnx")
    shutil.copy(DIGITS_TEST, tmp_path / "test.npz")
    shutil.copy(DIGITS_CALIB, tmp_path / "calib.npz")
    (tmp_path / "my_metrics.py").write_text(
        "import numpy as np\n"
        "def nan(outputs, labels):\n    return float('nan')\n"
        "def text(outputs, labels):\n    return '97.5'\n"
        "def flag(outputs, labels):\n    return True\n"
        "def many(outputs, labels):\n    return np.array([1.0, 2.0])\n"
        "def f32(outputs, labels):\n    return np.float32(97.5)\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def convert(cli, proj, *args):
    return cli("convert", "model.onnx", "--profile", "host", "--precision", "fp32", "-o", "out", "--json", *args,
               cwd=str(proj))


# --- 1. a user's metric returns one finite real number ----------------------------------------------

@pytest.mark.parametrize(("fn", "shown"), [("nan", "nan"), ("text", "str '97.5'")])
def test_a_user_metric_returning_nan_or_text_is_exit_3_naming_it(cli, proj, fn, shown):
    r = convert(cli, proj, "--eval", "test.npz", "--metric", f"my_metrics:{fn}", "--max-accuracy-drop", "1")
    refused(r, 3, f"my_metrics:{fn}", shown)
    assert not (proj / "out").exists()


def test_a_user_metric_that_needs_labels_on_unlabelled_data_is_told_why(proj):
    """What --prune auto's candidates met in optimize: judged on held-back --calib data, which has no labels."""
    (proj / "pairs.py").write_text("import numpy as np\n"
                                   "def verification(outputs, labels):\n"
                                   "    same = np.asarray(labels)[:, None] == np.asarray(labels)[None, :]\n"
                                   "    return 100.0 * float(same.mean())\n")
    outs = [{"304": np.full((1, 8), 0.5, np.float32)} for _ in range(4)]
    with pytest.raises(BadInputError, match=r"raised IndexError: .*labels=None: the calib data") as err:
        metric_for_outputs(outs, None, MetricSpec(name="pairs:verification"), search_path=[proj], role="calib")
    assert "None without them" in err.value.hint


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "97.5", True, np.bool_(False), None,
                                   np.array([1.0, 2.0]), [97.5], {"acc": 1.0}, 1 + 2j])
def test_checked_value_refuses_anything_but_a_finite_real(value):
    with pytest.raises(BadInputError, match="my:fn"):
        checked_value(value, "my:fn")


@pytest.mark.parametrize("value", [97, 97.5, np.float32(97.5), np.int64(3), np.array(12.0), -0.0])
def test_checked_value_takes_ints_floats_and_numpy_scalars(value):
    assert checked_value(value, "my:fn") == float(value)


# --- 2. flags that can't apply are refused, in the dry run and the real run alike ---------------------

@pytest.mark.parametrize("dry", [True, False])
def test_metric_axis_on_a_2d_output_is_refused_before_any_work(cli, proj, dry):
    r = convert(cli, proj, "--eval", "test.npz", "--metric-axis", "7", *(["--dry-run"] if dry else []))
    refused(r, 2, "--metric-axis 7 does not apply", "[N,10]")
    assert not (proj / "out").exists()


def test_min_sqnr_db_with_a_top1_metric_is_refused(cli, proj):
    r = convert(cli, proj, "--eval", "test.npz", "--metric", "top1", "--min-sqnr-db", "40")
    refused(r, 2, "--min-sqnr-db 40 does not apply", "top1")
    assert not (proj / "out").exists()


def test_optimize_refuses_a_metric_flag_no_build_could_apply(cli, proj):
    r = cli("optimize", "model.onnx", "--profile", "host", "--max-accuracy-drop", "1", "--calib", "calib.npz",
            "--metric-axis", "7", "-o", "best", "--json", cwd=str(proj))
    refused(r, 2, "--metric-axis 7 does not apply")
    assert not (proj / "best").exists()


def test_min_sqnr_db_alone_picks_the_sqnr_metric_and_its_gate():
    rng = np.random.default_rng(0)
    ref = [{"logits": rng.normal(size=(1, 10)).astype(np.float32)} for _ in range(8)]
    m = metric_for_outputs(ref, None, MetricSpec(min_sqnr_db=40))
    assert m.kind == MetricName.SQNR and m.fp32_value == 40


@pytest.mark.parametrize(("flags", "words"), [({"ctc_blank": 3}, "--ctc-blank 3"),
                                              ({"threshold": 0.3}, "--metric-threshold 0.3")])
def test_other_metric_flags_that_cant_apply_are_refused(flags, words):
    from edgeopt.errors import UsageError

    ref = [{"logits": np.eye(10, dtype=np.float32)[i % 10][None]} for i in range(8)]
    with pytest.raises(UsageError, match=words):
        metric_for_outputs(ref, None, MetricSpec(name="top1", **flags))


# --- 3. messages that point the right way -----------------------------------------------------------

def test_ctc_on_a_classifier_says_ctc_needs_sequences(cli, proj):
    r = convert(cli, proj, "--eval", "test.npz", "--metric", "ctc", "--dry-run")
    line = refused(r, 3, "[N,T,C]", "[N,10]")
    assert "--metric-axis" not in line


def test_eval_holding_python_objects_says_so(cli, proj):
    x = np.load(proj / "test.npz")["input"]
    np.savez(proj / "objects.npz", input=x, labels=np.array([{"digit": 1}] * len(x), dtype=object))
    line = refused(convert(cli, proj, "--eval", "objects.npz"), 3, "'labels' holds Python objects")
    assert "numpy.savez" not in line.split("(")[0]
    assert not (proj / "out").exists()


# --- 4 and 6. found before any work; --dry-run makes the same checks ---------------------------------

@pytest.mark.parametrize("dry", [True, False])
def test_one_sample_calib_with_recover_is_bad_data_before_any_work(cli, proj, dry):
    x = np.load(proj / "calib.npz")["input"][:1]
    np.savez(proj / "one.npz", input=x)
    r = convert(cli, proj, "--prune", "0.3", "--recover", "--calib", "one.npz", *(["--dry-run"] if dry else []))
    refused(r, 3, "at least 4 calibration samples", "has 1")
    assert not (proj / "out").exists()


def test_prune_auto_with_too_few_calib_samples_is_refused_by_the_dry_run(cli, proj):
    x = np.load(proj / "calib.npz")["input"][:5]
    np.savez(proj / "five.npz", input=x)
    r = convert(cli, proj, "--prune", "auto", "--max-accuracy-drop", "1", "--calib", "five.npz", "--dry-run")
    refused(r, 3, "--prune auto needs at least 16 calibration samples", "has 5")


def test_a_dynamic_batch_is_converted_at_one_and_other_dynamic_dims_are_refused(cli, tmp_path):
    """A batch dim left dynamic by the exporter ([N,3,8,8]) is converted at batch 1, said as the --input-shape that
    would say so and recorded in the plan; a dynamic height has no safe default: exit 3 naming the flag."""
    import onnx

    model = conv_bn_model(tmp_path / "dyn.onnx", batch="N")
    r = cli("convert", str(model), "--profile", "host", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert any("batch dim is dynamic: converted at batch 1 (--input-shape x=1x3x8x8" in w for w in out["warnings"])
    assert out["plan"]["stages"][0]["config"]["input_shapes"] == {"x": [1, 3, 8, 8]}
    two = cli("convert", str(model), "--profile", "host", "--dry-run", "--json", "--input-shape", "x=2x3x8x8")
    assert two.returncode == 0 and not any("batch dim" in w for w in json.loads(two.stdout)["warnings"])
    proto = onnx.load(str(model))
    proto.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    onnx.save(proto, str(tmp_path / "dyn_h.onnx"))
    r = cli("convert", str(tmp_path / "dyn_h.onnx"), "--profile", "host", "--dry-run", "--json")
    refused(r, 3, "dynamic dims", "--input-shape x=1x3x1x8")


def _save_graph(path: Path, name: str, nodes, inputs, output: tuple, inits: dict) -> Path:
    """A one-output ONNX model (opset 18) from helper nodes; ``inputs``: (name, elem type, shape) tuples."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    g = h.make_graph(nodes, name, [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(output[0], T.FLOAT, output[1])],
                     [nh.from_array(a, k) for k, a in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def _token_model(path: Path) -> Path:
    """ids:int64[1,6] -> Gather(embedding 20x8) -> ReduceMean -> Gemm -> logits[1,3]: a model with integer inputs."""
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(0)
    nodes = [h.make_node("Gather", ["emb", "ids"], ["e"]), h.make_node("ReduceMean", ["e", "axes"], ["m"], keepdims=0),
             h.make_node("Gemm", ["m", "w"], ["logits"], transB=1)]
    return _save_graph(path, "tokens", nodes, [("ids", T.INT64, [1, 6])], ("logits", [1, 3]),
                       {"emb": rng.normal(size=(20, 8)).astype(np.float32),
                        "w": rng.normal(size=(3, 8)).astype(np.float32), "axes": np.array([1], np.int64)})


# --- #23 item 5: embeddings told by their values; an "int8" artifact holds quantized ops --------------

def _embedder(path: Path) -> Path:
    """x[1,16] -> MatMul -> Tanh -> MatMul -> LpNormalization: a unit-norm embedding whose output is named
    '304', as a torch export names it."""
    from onnx import TensorProto as T
    from onnx import helper as h

    rng = np.random.default_rng(0)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["h"]), h.make_node("Tanh", ["h"], ["t"]),
             h.make_node("MatMul", ["t", "w2"], ["e"]), h.make_node("LpNormalization", ["e"], ["304"], axis=-1, p=2)]
    return _save_graph(path, "embed", nodes, [("x", T.FLOAT, [1, 16])], ("304", [1, 32]),
                       {"w1": rng.normal(size=(16, 64)).astype(np.float32) / 4,
                        "w2": rng.normal(size=(64, 32)).astype(np.float32) / 8})


def test_an_embedding_with_a_numeric_output_name_is_judged_by_cosine(cli, tmp_path):
    model = _embedder(tmp_path / "embed.onnx")
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(1).normal(size=(40, 1, 16)).astype(np.float32))
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--calib",
            str(tmp_path / "calib.npz"), "-o", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["validation"]
    assert v["metric"] == "cosine_vs_fp32" and "proxy" in v["metric_description"]
    assert v["units"]["quantized"] == 2 and v["units"]["float"] == 0


def test_a_probability_row_is_not_mistaken_for_an_embedding():
    from edgeopt.metrics import looks_like_embedding

    rng = np.random.default_rng(0)
    probs = [np.exp(r) / np.exp(r).sum() for r in rng.normal(size=(8, 10))]
    units = [r / np.linalg.norm(r) for r in rng.normal(size=(8, 32))]
    assert not looks_like_embedding(probs) and looks_like_embedding(units)
    assert not looks_like_embedding([r * 3 for r in units])  # logits of a classifier: no unit norm


def test_an_int8_artifact_with_no_quantized_op_fails_its_gate(cli, tmp_path):
    excluded = ["/0/Conv_output_0", "/3/Conv_output_0", "/7/Conv_output_0", "/10/Conv_output_0", "/15/Gemm"]
    (tmp_path / "r.yaml").write_text(json.dumps({"stages": {"qdq": {"nodes_to_exclude": excluded}}}))
    r = cli("convert", str(DIGITS), "--profile", "host", "--backend", "onnxruntime", "--calib", str(DIGITS_CALIB),
            "--eval", str(DIGITS_TEST), "--recipe", str(tmp_path / "r.yaml"), "-o", str(tmp_path / "out"), "--json")
    refused(r, 5, "labelled int8 but none of the 5 compute ops in model.onnx is quantized")
    assert json.loads(r.stdout)["error"]["details"]["validation"]["units"] == {"quantized": 0, "float": 5,
                                                                               "file": "model.onnx"}
    assert not (tmp_path / "out").exists()


def test_units_are_counted_in_every_artifact_format(tmp_path):
    from fixtures_convert import make_ort_artifact

    from edgeopt.quant_units import count_units

    art = make_ort_artifact(tmp_path / "fp32")
    assert count_units(art, {"model": "model.onnx"}) == {"quantized": 0, "float": 5, "file": "model.onnx"}
    assert count_units(art, {"model": "model.so"}) is None  # a compiled library is not read


@pytest.mark.openvino
def test_openvino_int8_units_are_read_from_the_ir(cli, tmp_path):
    r = cli("convert", str(DIGITS), "--profile", "host", "--backend", "openvino", "--calib", str(DIGITS_CALIB),
            "-o", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    units = json.loads(r.stdout)["validation"]["units"]
    assert units["file"] == "model.xml" and units["quantized"] >= 4


@pytest.mark.realmodels
@pytest.mark.slow
def test_resemblyzers_speaker_encoder_is_judged_by_cosine_under_its_numeric_output_name(cli, tmp_path):
    """resemblyzer's pretrained LSTM speaker encoder (3 LSTM + Linear + ReLU + L2 norm), exported by torch: its
    output gets a number for a name, and it is still judged as an embedding (cosine), never by argmax."""
    import onnx

    pytest.importorskip("torch")
    from fixtures.speaker_encoder import export_speaker_encoder

    try:  # torch names the output itself (a number), as a plain export does
        model = export_speaker_encoder(tmp_path / "encoder.onnx", output_name=None, frames=40)
    except FileNotFoundError:
        pytest.skip("resemblyzer is not installed")
    out_name = onnx.load(str(model)).graph.output[0].name
    assert out_name.isdigit()  # what the issue saw: "304"
    mels = np.random.default_rng(0).random((24, 1, 40, 40)).astype(np.float32)  # synthetic mel frames
    np.savez(tmp_path / "calib.npz", mels=mels)
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32",
            "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["validation"]
    assert v["metric"] == "cosine_vs_fp32" and "proxy" in v["metric_description"]
    assert v["units"]["float"] >= 4 and v["units"]["quantized"] == 0
