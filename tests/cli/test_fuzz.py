"""A fuzzed front door: every loader a user reaches, fed mutated real inputs.

Property: the outcome is an exit code in {0, 2, 3, 4, 5} (never 1, the "internal error" of a bug),
within a bounded time (hypothesis' deadline), and nothing is left behind in the directory the input
sits in. Most cases call the loader in-process and map exceptions the way the CLI does (fast); a few
go through the real CLI. The default suite runs a few hundred examples; ``-m slow`` runs more.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeopt.errors import EdgeoptError

REPO = Path(__file__).resolve().parents[2]
MODELS = sorted((REPO / "fixtures" / "models").glob("*.onnx"))
ALLOWED = {0, 2, 3, 4, 5}
FAST = settings(max_examples=40, deadline=5000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow], derandomize=True)
MORE = settings(max_examples=400, deadline=10000, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def _loaders_imported():
    """The loaders import their libraries (onnx, the CLI, yaml, toml) on first use: done once here, so that
    hypothesis' deadline times the loading of each input and not Python's imports (seconds on a loaded machine)."""
    import edgeopt.artifact
    import edgeopt.cli
    import edgeopt.data
    import edgeopt.metrics
    import edgeopt.pipeline.recipe
    import edgeopt.plan
    import edgeopt.profiles
    import edgeopt.remote.inventory
    import edgeopt.runtime.measure  # noqa: F401
    from edgeopt.model import graph_inputs, load_onnx

    graph_inputs(load_onnx(MODELS[0]))


def exit_code_of(fn) -> int:
    """Run ``fn`` and give the exit code the CLI would: an EdgeoptError's own, an environment fault 3;
    anything else is the bug this fuzzing looks for and is re-raised (with its traceback)."""
    from edgeopt.cli import environment_fault

    try:
        fn()
        return 0
    except EdgeoptError as err:
        return int(err.exit_code)
    except Exception as err:
        env = environment_fault(err)
        if env is not None:
            return int(env.exit_code)
        raise


def _fresh(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fz")


def _left(d: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name not in keep)


# --- ONNX bytes ----------------------------------------------------------------------------------------

def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        b[pos % len(b)] = val
    return bytes(b[:cut] if cut is not None else b)


@FAST
@given(model=st.sampled_from(MODELS), edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                                     max_size=8),
       cut=st.none() | st.integers(0, 80000))
def test_mutated_onnx_loads_or_is_refused(tmp_path_factory, model, edits, cut):
    from edgeopt.model import graph_inputs, graph_outputs, load_onnx

    d = _fresh(tmp_path_factory)
    p = d / "m.onnx"
    p.write_bytes(_mutate(model.read_bytes(), edits, cut))

    def load():
        m = load_onnx(p)
        graph_inputs(m), graph_outputs(m)

    assert exit_code_of(load) in ALLOWED
    assert _left(d, {"m.onnx"}) == []


@FAST
@given(data=st.binary(max_size=256))
def test_random_bytes_as_onnx(tmp_path_factory, data):
    from edgeopt.model import load_onnx

    d = _fresh(tmp_path_factory)
    p = d / "m.onnx"
    p.write_bytes(data)
    assert exit_code_of(lambda: load_onnx(p)) in ALLOWED


# --- --input-shape strings -----------------------------------------------------------------------------

_SHAPE_CHARS = string.ascii_letters[:6] + string.digits + "=x,:-_ .;*" + "\u00e9\u0661"


@settings(max_examples=150, deadline=2000, derandomize=True, database=None)
@given(spec=st.text(alphabet=_SHAPE_CHARS, max_size=30))
def test_input_shape_strings(spec):
    from edgeopt.model import parse_input_shapes

    assert exit_code_of(lambda: parse_input_shapes([spec])) in ALLOWED


@FAST
@given(dims=st.lists(st.integers(-2, 70), min_size=0, max_size=6), name=st.sampled_from(["input", "x", "inp"]))
def test_input_shape_on_a_real_model(dims, name):
    from edgeopt.model import fix_input_shapes, load_onnx, parse_input_shapes

    model = load_onnx(REPO / "fixtures" / "models" / "mnist_cnn.onnx")
    spec = f"{name}=" + "x".join(map(str, dims))
    assert exit_code_of(lambda: fix_input_shapes(model, parse_input_shapes([spec]))) in ALLOWED


# --- npz data ------------------------------------------------------------------------------------------

_DTYPES = st.sampled_from(["float32", "float64", "float16", "int8", "uint8", "int64", "bool", "complex64", "U3",
                           "object"])


@st.composite
def npz_arrays(draw):
    arrays = {}
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["input", "labels", "x", "images", ""]))
        dtype = draw(_DTYPES)
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=5)))
        if dtype == "object":
            arr = np.empty(shape, dtype=object)
            arr.fill(draw(st.sampled_from([None, "a", 1.5])))
        elif dtype == "U3":
            arr = np.full(shape, "ab", dtype="U3")
        else:
            arr = np.ones(shape, dtype=dtype)
        if name:
            arrays[name] = arr
    return arrays


@FAST
@given(arrays=npz_arrays(), role=st.sampled_from(["calib", "eval"]))
def test_npz_files(tmp_path_factory, arrays, role):
    from edgeopt.data import load_data
    from edgeopt.model import graph_inputs, load_onnx

    specs = graph_inputs(load_onnx(REPO / "fixtures" / "models" / "mnist_cnn.onnx"))
    d = _fresh(tmp_path_factory)
    p = d / "d.npz"
    np.savez(p, **arrays)
    assert exit_code_of(lambda: load_data(str(p), specs, role=role, need_labels=role == "eval")) in ALLOWED
    assert _left(d, {"d.npz"}) == []


@FAST
@given(data=st.binary(max_size=300))
def test_random_bytes_as_npz(tmp_path_factory, data):
    from edgeopt.data import load_data
    from edgeopt.model import graph_inputs, load_onnx

    specs = graph_inputs(load_onnx(REPO / "fixtures" / "models" / "mnist_cnn.onnx"))
    d = _fresh(tmp_path_factory)
    p = d / "d.npz"
    p.write_bytes(b"PK\x03\x04" + data if data[:1] == b"\0" else data)
    assert exit_code_of(lambda: load_data(str(p), specs)) in ALLOWED


# --- YAML: profiles, convert recipes, pipeline recipes ------------------------------------------------

_yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                          st.text(max_size=8), st.sampled_from(["int8", "fp32", "host", "pi5", "openvino", "auto"]))
_yaml_values = st.recursive(_yaml_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.sampled_from(["name", "precision", "backend", "targets", "model", "path", "cpu", "units", "memory", "x",
                     "version", "stages", "gates", "data", "profile", "inputs", "threads", "calib"]), c,
    max_size=4), max_leaves=12)


def _profile_text(draw_value) -> str:
    import yaml

    return yaml.safe_dump(draw_value)


@FAST
@given(value=_yaml_values, base=st.sampled_from(["pi5", "rpi4", "jetson-orin-nano", "x86-avx512", "intel-npu"]),
       raw=st.booleans(), text=st.text(max_size=60))
def test_profile_yaml(tmp_path_factory, value, base, raw, text):
    import yaml

    from edgeopt.profiles import load_profile_file

    builtin = REPO / "device_profiles" / f"{base}.yaml"
    d = _fresh(tmp_path_factory)
    p = d / "p.yaml"
    if raw:
        p.write_text(text)
    else:
        data = yaml.safe_load(builtin.read_text())
        key = sorted(data)[len(str(value)) % len(data)]
        data[key] = value  # one real field replaced by something else
        p.write_text(yaml.safe_dump(data))
    assert exit_code_of(lambda: load_profile_file(p)) in ALLOWED


@FAST
@given(value=_yaml_values, text=st.text(max_size=60) | st.binary(max_size=60), raw=st.booleans())
def test_convert_recipe_yaml(tmp_path_factory, value, text, raw):
    import yaml

    from edgeopt.plan import load_recipe, make_plan
    from edgeopt.profiles import load_profile

    d = _fresh(tmp_path_factory)
    p = d / "r.yaml"
    if raw and isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text if raw else yaml.safe_dump(value))
    assert exit_code_of(lambda: make_plan(load_profile("host"), recipe=load_recipe(p))) in ALLOWED


@FAST
@given(value=_yaml_values, field=st.sampled_from(["model", "data", "targets", "gates", "output", "version", "extra"]))
def test_pipeline_recipe_yaml(tmp_path_factory, value, field):
    import yaml

    from edgeopt.pipeline.recipe import load_pipeline_recipe

    d = _fresh(tmp_path_factory)
    data = {"version": 1, "model": {"path": "m.onnx"}, "targets": [{"name": "host", "profile": "host"}]}
    data[field] = value
    p = d / "edgeopt.yaml"
    p.write_text(yaml.safe_dump(data))
    assert exit_code_of(lambda: load_pipeline_recipe(p)) in ALLOWED
    assert _left(d, {"edgeopt.yaml"}) == []


# --- manifest JSON -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_manifest(tmp_path_factory):
    from edgeopt.convert import convert

    out = tmp_path_factory.mktemp("man") / "art"
    convert(str(REPO / "fixtures" / "models" / "mnist_cnn.onnx"), "host", str(out), backend="onnxruntime",
            precision="fp32")
    return out


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                            max_leaves=8)


@FAST
@given(value=_json_values, drop=st.booleans(), raw=st.none() | st.text(max_size=40))
def test_manifest_json(tmp_path_factory, real_manifest, value, drop, raw):
    import shutil

    from edgeopt.artifact import load_artifact, verify_artifact
    from edgeopt.runtime.measure import BadArtifact, read_artifact

    d = _fresh(tmp_path_factory) / "art"
    shutil.copytree(real_manifest, d)
    data = json.loads((d / "manifest.json").read_text())
    key = sorted(data)[len(repr(value)) % len(data)]
    if drop:
        data.pop(key)
    else:
        data[key] = value
    (d / "manifest.json").write_text(raw if raw is not None else json.dumps(data))

    def read():
        try:
            read_artifact(str(d))
        except BadArtifact:
            pass  # bench maps it to exit 3
        verify_artifact(d)
        load_artifact(d)

    assert exit_code_of(read) in ALLOWED


# --- devices.toml --------------------------------------------------------------------------------------

_toml_values = st.one_of(st.integers(-3, 70000), st.text(alphabet=string.printable, max_size=12), st.booleans(),
                         st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(0, 9), max_size=3))


@FAST
@given(field=st.sampled_from(["host", "port", "user", "profile", "python", "work_dir", "transport", "key", "emulated",
                              "env", "bogus", "cores"]), value=_toml_values, raw=st.none() | st.text(max_size=60) | st.binary(max_size=60),
       name=st.sampled_from(["pi", "a b", "x" * 70, "", "ok-1"]))
def test_devices_toml(tmp_path_factory, field, value, raw, name):
    from edgeopt.remote.inventory import get_device, load_devices

    def lit(v):
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    d = _fresh(tmp_path_factory)
    p = d / "devices.toml"
    body = {"host": "127.0.0.1", "profile": "host", field: value}
    text = f'[devices."{name}"]\n' + "".join(f"{k} = {lit(v)}\n" for k, v in body.items())
    if isinstance(raw, bytes):
        p.write_bytes(raw)
    else:
        p.write_text(raw if raw is not None else text)

    def load():
        load_devices(p)
        get_device(name or "pi", p)

    assert exit_code_of(load) in ALLOWED
    assert _left(d, {"devices.toml"}) == []


# --- a few through the real CLI ------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["analyze", "{bad}"],
    ["analyze", "{model}", "--input-shape", "input=1x1x0x28"],
    ["analyze", "{model}", "--input-shape", "input=1x1xx28"],
    ["analyze", "{model}", "--input-shape", "nope=1x1x28x28"],
    ["convert", "{model}", "--profile", "{bad}", "-o", "{out}"],
    ["convert", "{model}", "--profile", "host", "--calib", "{bad}", "-o", "{out}"],
    ["convert", "{model}", "--profile", "host", "--recipe", "{bad}", "-o", "{out}"],
    ["inspect", "{dir}"],
    ["bench", "{dir}"],
    ["pipeline", "run", "{bad}"],
    ["devices", "list", "--devices", "{bad}"],
])
def test_cli_on_garbage_files(cli, tmp_path, args):
    bad = tmp_path / "garbage.bin"
    bad.write_bytes(os.urandom(512))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "manifest.json").write_bytes(os.urandom(64))
    fill = {"bad": str(bad), "model": str(REPO / "fixtures" / "models" / "mnist_cnn.onnx"),
            "out": str(tmp_path / "out"), "dir": str(tmp_path / "d")}
    r = cli(*[a.format(**fill) for a in args], "--json", timeout=120)
    assert r.returncode in ALLOWED - {0}, (args, r.stderr)
    assert r.stdout.count("\n") == 1 and json.loads(r.stdout)["ok"] is False
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "garbage.bin"]


# --- more of the same, for -m slow ---------------------------------------------------------------------

@pytest.mark.slow
@MORE
@given(model=st.sampled_from(MODELS), edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                                     max_size=32), cut=st.none() | st.integers(0, 80000))
def test_mutated_onnx_many(tmp_path_factory, model, edits, cut):
    test_mutated_onnx_loads_or_is_refused.hypothesis.inner_test(tmp_path_factory, model, edits, cut)


@pytest.mark.slow
@MORE
@given(arrays=npz_arrays(), role=st.sampled_from(["calib", "eval"]))
def test_npz_many(tmp_path_factory, arrays, role):
    test_npz_files.hypothesis.inner_test(tmp_path_factory, arrays, role)


# --- what a user's metric returns, and the names a user profile claims ----------------------

_returns = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.complex_numbers(max_magnitude=10), st.lists(st.floats(-1, 1), max_size=3),
    st.dictionaries(st.text(max_size=3), st.floats(-1, 1), max_size=2),
    st.sampled_from([np.float32(97.5), np.float16(np.inf), np.int8(-3), np.bool_(True), np.array(1.5),
                     np.array([1.0, 2.0]), np.array("97"), np.uint64(2**63), np.float64(np.nan)]))


@pytest.fixture(scope="module")
def returning_metric(tmp_path_factory):
    """A user's metric module whose function returns whatever ``VALUE`` holds."""
    import importlib
    import sys

    d = tmp_path_factory.mktemp("metric")
    (d / "fuzz_user_metric.py").write_text("VALUE = 0.0\n\ndef score(outputs, labels):\n    return VALUE\n")
    sys.path.insert(0, str(d))
    try:
        yield importlib.import_module("fuzz_user_metric"), d
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("fuzz_user_metric", None)


def _is_finite_real(value) -> bool:
    import math

    if isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "iuf":
            return False
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return math.isfinite(float(value))


@FAST
@given(value=_returns)
def test_user_metric_return_values(returning_metric, value):
    """Exit 0 exactly when the metric returned one finite real number; anything else is exit 3, never 1."""
    from edgeopt.metrics import MetricSpec, metric_for_outputs

    module, d = returning_metric
    module.VALUE = value
    outs = [{"logits": np.eye(10, dtype=np.float32)[i % 10][None]} for i in range(4)]
    code = exit_code_of(lambda: metric_for_outputs(outs, None, MetricSpec(name="fuzz_user_metric:score"),
                                                   search_path=[d]))
    assert code == (0 if _is_finite_real(value) else 3), (value, code)


_names = st.sampled_from(["pi5", "rpi5", "raspberry-pi", "jetson-orin", "orin-nano", "intel-npu", "host", "my-board",
                          "lab-b", "Bad Name", "", "x" * 80]) | st.text(string.ascii_lowercase + "-_.0 /", max_size=12)


@FAST
@given(name=_names, aliases=st.none() | st.lists(_names, max_size=3) | _names, family=st.none() | _names,
       other=st.none() | st.lists(_names, max_size=2))
def test_profile_name_fields(tmp_path_factory, name, aliases, family, other):
    """Any name, aliases and family in a user profile (beside another user profile claiming ``other``): loaded
    or refused with exit 3, never 1; once it loads, each of its names reaches it and no other profile."""
    import yaml

    from edgeopt.profiles import load_profile, profile_index

    d = _fresh(tmp_path_factory)
    data = yaml.safe_load((REPO / "device_profiles" / "pi5.yaml").read_text())
    for k in ("family", "family_default", "aliases"):
        data.pop(k, None)
    mine = {**data, "name": name, **({"aliases": aliases} if aliases is not None else {}),
            **({"family": family} if family is not None else {})}
    stem = name if isinstance(name, str) and name and "/" not in name and len(name) < 60 else "p"
    (d / f"{stem}.yaml").write_text(yaml.safe_dump(mine))
    if other is not None:
        (d / "lab-other.yaml").write_text(yaml.safe_dump({**data, "name": "lab-other", "aliases": other}))
    code = exit_code_of(lambda: load_profile(stem, [d]))
    assert code in (0, 3), code
    if code == 0 and isinstance(aliases, list):
        index = profile_index([d])
        assert all(index[a].name == name for a in aliases), (aliases, index)
