"""The TVM backend (ONNX → Relax → model.so), its runner, cross-compilation and MetaSchedule tuning.

Real TVM 0.27 throughout, on the digits CNN and its human-labelled test split. Tuning tests use a
handful of trials (each build pays a ~30 s worker import on 2 cores) and are marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgeopt.data import load_npz

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DATA = REPO / "fixtures" / "data"

pytestmark = pytest.mark.tvm


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(head[18:20], "little")


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("EDGEOPT_CACHE_DIR", str(cache))
    return {"EDGEOPT_CACHE_DIR": str(cache)}


@pytest.fixture(scope="module")
def host_fp32(tmp_path_factory):
    """The digits CNN converted to a host TVM library (FP32, validated on the real test split)."""
    from edgeopt.convert import convert

    out = tmp_path_factory.mktemp("tvm") / "digits_fp32"
    old = os.environ.get("EDGEOPT_CACHE_DIR")
    os.environ["EDGEOPT_CACHE_DIR"] = str(out.parent / "empty-cache")  # no tuning database: untuned
    try:
        result = convert(DIGITS, "host", out, backend="tvm", precision="fp32", eval=DATA / "digits_test.npz")
    finally:
        if old is None:
            os.environ.pop("EDGEOPT_CACHE_DIR", None)
        else:
            os.environ["EDGEOPT_CACHE_DIR"] = old
    return out, result


# --------------------------------------------------------------------------- targets and keys


def test_backend_contract_and_profile_target():
    from edgeopt.converters.backends.tvm import BACKEND
    from edgeopt.converters.base import ChainOptions
    from edgeopt.enums import BackendName, Precision
    from edgeopt.profiles import load_profile

    assert BACKEND.extra == "tvm" and not BACKEND.quantizes_itself and BACKEND.available()
    pi5 = load_profile("pi5").backend(BackendName.TVM)
    cfg = BACKEND.configure(ChainOptions(backend=BackendName.TVM, precision=Precision.FP32,
                                         backend_settings=dict(pi5.settings), profile_name="pi5"))
    assert cfg.target["mcpu"] == "cortex-a76" and cfg.target["mtriple"] == "aarch64-linux-gnu"
    assert cfg.profile_name == "pi5"  # named by the untuned library's 'edgeopt tune' hint


def test_resolve_target_fills_host_cpu_but_not_a_foreign_one():
    import tvm

    from edgeopt.converters.backends.tvm import build as tb

    host = tb.resolve_target({"kind": "llvm", "num-cores": 2})
    assert host["mcpu"] == tvm.target.codegen.llvm_get_system_cpu()
    assert host["mtriple"].startswith(tb.host_arch())
    pi5 = tb.resolve_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 4})
    assert "mcpu" not in pi5 and tb.is_cross(pi5)
    orin = tb.resolve_target({"kind": "cuda", "arch": "sm_87", "host": {"kind": "llvm", "mtriple": "aarch64-linux-gnu",
                                                                        "mcpu": "cortex-a78ae"}})
    assert tb.device_kind(orin) == "cuda" and tb.target_arch(orin) == "aarch64"
    tb.make_target(orin)  # TVM accepts the Orin GPU target dict


def test_tuning_key_depends_on_graph_and_target():
    import onnx

    from edgeopt.converters.backends.tvm import build as tb

    proto = onnx.load(DIGITS)
    a = tb.tuning_key(proto, {"kind": "llvm", "mcpu": "znver4"})
    assert a == tb.tuning_key(onnx.load(DIGITS), {"mcpu": "znver4", "kind": "llvm"})
    assert a != tb.tuning_key(proto, {"kind": "llvm", "mcpu": "cortex-a76"})
    proto.graph.initializer[0].raw_data = bytes(len(proto.graph.initializer[0].raw_data))
    assert a != tb.tuning_key(proto, {"kind": "llvm", "mcpu": "znver4"})


# --------------------------------------------------------------------------- convert


def test_fp32_host_library_matches_onnxruntime(host_fp32):
    import onnxruntime as ort

    from edgeopt.runtime.runners import open_runner

    out, result = host_fp32
    manifest = json.loads((out / "manifest.json").read_text())
    rt = manifest["runtime"]
    assert rt["model"] == "model.so" and (out / "model.so").is_file()
    assert rt["settings"]["tuning"]["tuned"] is False and rt["settings"]["versions"]["apache-tvm"]
    assert rt["settings"]["versions"]["apache-tvm-ffi"] and rt["settings"]["target"]["mcpu"]
    test = load_npz(DATA / "digits_test.npz")
    sess = ort.InferenceSession(str(DIGITS), providers=["CPUExecutionProvider"])
    cos = []
    with open_runner(str(out)) as runner:
        for i in range(0, 540, 27):
            x = test.arrays["input"][i:i + 1]
            got = runner.run({"input": x})["logits"]
            want = sess.run(None, {"input": x})[0]
            cos.append(_cosine(got, want))
    assert min(cos) > 0.9999
    v = result.validation
    assert v.data_source == "eval" and v.accuracy_drop == 0.0 and v.cosine_min > 0.9999


def test_pi5_cross_compile_gives_an_aarch64_library(tmp_path, cache_env):
    from edgeopt.convert import convert

    out = tmp_path / "pi5"
    result = convert(DIGITS, "pi5", out, backend="tvm", precision="fp32")
    assert _elf_machine(out / "model.so") == 183  # EM_AARCH64
    rt = result.manifest.runtime
    assert rt.settings["target"]["mcpu"] == "cortex-a76" and rt.settings["arch"] == "aarch64"
    # validation here ran this machine's build of the same graph, and says so
    assert rt.host_twin.model.endswith(".so") and _elf_machine(out / rt.host_twin.model) != 183
    assert any("not the device library" in w for w in result.warnings)
    assert result.validation.cosine_min > 0.9999


def test_int8_qdq_imports_and_keeps_accuracy(tmp_path, cache_env):
    from edgeopt.convert import convert

    out = tmp_path / "int8"
    result = convert(DIGITS, "host", out, backend="tvm", precision="int8", calib=DATA / "digits_calib.npz",
                     eval=DATA / "digits_test.npz")
    v = result.validation
    assert v.accuracy_drop <= 1.0 and v.top1_agreement > 0.98
    assert any("no INT8 speed-up" in n for n in result.manifest.runtime.notes)


def test_unsupported_op_exits_3_naming_it(tmp_path, cli):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Celu", ["x"], ["y"], alpha=1.0)], "celu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "celu.onnx"
    onnx.save(model, path)
    r = cli("convert", str(path), "--profile", "host", "--backend", "tvm", "--precision", "fp32",
            "-o", str(tmp_path / "out"), "--json")
    assert r.returncode == 3, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "unsupported_op" and "Celu" in err["message"]
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_missing_cross_compiler_simulated_by_path_exits_4(tmp_path, cli):
    empty = tmp_path / "bin"
    empty.mkdir()
    r = cli("convert", str(DIGITS), "--profile", "pi5", "--backend", "tvm", "--precision", "fp32",
            "-o", str(tmp_path / "out"), "--json", env={"PATH": str(empty)})
    assert r.returncode == 4, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "aarch64-linux-gnu-g++" in err["message"] and "g++-aarch64-linux-gnu" in err["hint"]
    assert not (tmp_path / "out").exists()


def test_runner_refuses_a_foreign_library_without_twin(tmp_path, host_fp32):
    from edgeopt.runtime.runners import open_runner
    from edgeopt.runtime.runners.base import RuntimeMissing

    out, _ = host_fp32
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["runtime"]["settings"]["arch"] = "riscv64"
    with pytest.raises(RuntimeMissing, match="riscv64"):
        open_runner(str(out), manifest=manifest)


def test_device_bundle_runs_without_the_compiler_library(tmp_path, host_fp32):
    from edgeopt.converters.backends.tvm.build import device_bundle

    out, _ = host_fp32
    info = device_bundle(tmp_path / "bundle")
    site = Path(info["site"])
    assert not list(site.rglob("libtvm_compiler.so")) and (site / "tvm" / "lib" / "libtvm_runtime.so").is_file()
    assert info["bytes"] < 150e6
    script = ("import sys, numpy as np; from edgeopt.runtime.runners import open_runner\n"
              "r = open_runner(sys.argv[1]); y = r.run({'input': np.zeros((1, 1, 8, 8), np.float32)})['logits']\n"
              "print(y.shape, 'tvm.relax' in sys.modules)")
    # -S: no site-packages, so only the bundle (and the edgeopt source tree) can be imported
    env = {"PYTHONPATH": f"{site}{os.pathsep}{REPO / 'edgeopt' / '..'}", "PATH": os.environ.get("PATH", "")}
    r = subprocess.run([sys.executable, "-S", "-c", script, str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "(1, 10) False" in r.stdout


# --------------------------------------------------------------------------- tuning (slow)


@pytest.mark.slow
def test_tune_writes_a_database_that_convert_reuses(tmp_path, cli, cache_env):
    r = cli("tune", str(DIGITS), "--profile", "host", "--precision", "fp32", "--trials", "2", "--json",
            env=cache_env, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    tuned = json.loads(r.stdout)
    db = Path(tuned["database"])
    assert db.parent == Path(cache_env["EDGEOPT_CACHE_DIR"]) / "tvm-tuning" and db.name == tuned["key"]
    assert tuned["trials_measured"] >= 1 and tuned["records"] >= 1
    assert (db / "database_tuning_record.json").stat().st_size > 0
    r = cli("convert", str(DIGITS), "--profile", "host", "--backend", "tvm", "--precision", "fp32",
            "-o", str(tmp_path / "art"), "--json", env=cache_env, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    tuning = manifest["runtime"]["settings"]["tuning"]
    assert tuning["tuned"] is True and tuning["database"] == str(db) and tuning["found_by"] == "cache"
    assert tuning["key"] == tuned["key"]
    assert manifest["validation"]["cosine_min"] > 0.9999


@pytest.mark.slow
def test_tune_interrupted_keeps_its_database(tmp_path, cache_env):
    db = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-m", "edgeopt", "tune", str(DIGITS), "--profile", "host",
                             "--precision", "fp32", "--trials", "200", "--tuning-db", str(db), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **cache_env})
    records = db / "database_tuning_record.json"
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline and proc.poll() is None:
        if records.is_file() and records.stat().st_size > 0:
            break
        time.sleep(2)
    assert proc.poll() is None, "tuning ended before it could be interrupted"
    assert records.is_file() and records.stat().st_size > 0, "no record within the deadline"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out)["stopped_by"] == "interrupted"
    lines = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    assert lines and (db / "database_workload.json").stat().st_size > 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_tune_measures_through_a_local_rpc_tracker(tmp_path, cli, cache_env):
    """The RPC plumbing (tracker + server as on a board), on 127.0.0.1 with this machine as the 'board'."""
    import importlib.util

    import tvm.rpc

    if importlib.util.find_spec("tornado") is None:
        pytest.skip("TVM's RPC tracker needs tornado (pip install tornado)")
    tport, sport = _free_port(), _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(tport),
                               "--port-end", str(tport + 1), "--silent"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(3)
        procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                       "--port", str(sport), "--port-end", str(sport + 20), "--tracker",
                                       f"127.0.0.1:{tport}", "--key", "edgeopt-test"], start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if "edgeopt-test" in tvm.rpc.connect_tracker("127.0.0.1", tport).text_summary():
                    break
            except Exception:  # noqa: BLE001 - the tracker is still starting
                pass
            time.sleep(2)
        else:
            pytest.fail("the RPC server did not register with the tracker")
        db = tmp_path / "rpc-db"
        r = cli("tune", str(DIGITS), "--profile", "host", "--precision", "fp32", "--trials", "2", "--tuning-db", str(db),
                "--rpc-tracker", f"127.0.0.1:{tport}", "--rpc-key", "edgeopt-test", "--json", env=cache_env, timeout=1800)
        assert r.returncode == 0, r.stderr[-2000:]
        tuned = json.loads(r.stdout)
        assert tuned["runner"] == f"rpc 127.0.0.1:{tport} key edgeopt-test"
        assert tuned["trials_measured"] >= 1 and tuned["trials_failed"] < tuned["trials_measured"]
        assert tuned["records"] >= 1 and tuned["best_ms"]
    finally:
        for p in reversed(procs):
            with_group = os.getpgid(p.pid) if p.poll() is None else None
            if with_group:
                os.killpg(with_group, signal.SIGTERM)
            p.wait(timeout=30)


@pytest.mark.slow
def test_pi5_library_runs_under_qemu_with_the_aarch64_runtime_bundle(tmp_path):
    """The cross-compiled library on an emulated Cortex-A76, with a runtime-only aarch64 TVM (no compiler lib)."""
    import shutil

    from edgeopt.convert import convert
    from edgeopt.converters.backends.tvm.build import device_bundle
    from edgeopt.remote.emulate.sysroot import emulate_cache

    root = emulate_cache() / "sysroot-bookworm-arm64"
    qemu = shutil.which("qemu-aarch64-static")
    if not qemu or not (root / "usr" / "bin" / "python3.11").exists():
        pytest.skip("no aarch64 sysroot (edgeopt emulate builds it) or qemu-aarch64-static")
    art = tmp_path / "pi5"
    convert(DIGITS, "pi5", art, backend="tvm", precision="fp32")
    info = device_bundle(tmp_path / "bundle", "aarch64", wheel_dir=tmp_path / "wheels")
    assert not list(Path(info["site"]).rglob("libtvm_compiler.so"))
    x = load_npz(DATA / "digits_test.npz").arrays["input"][:1]
    np.save(tmp_path / "x.npy", x)
    shutil.copytree(REPO / "edgeopt" / "runtime", tmp_path / "dev" / "runtime")
    script = ("import sys, numpy as np; from runtime.runners import open_runner\n"
              f"r = open_runner({str(art)!r}); y = r.run({{'input': np.load({str(tmp_path / 'x.npy')!r})}})['logits']\n"
              f"np.save({str(tmp_path / 'y.npy')!r}, y); print(r.library_file)")
    r = subprocess.run([qemu, "-cpu", "cortex-a76", "-L", str(root), str(root / "usr" / "bin" / "python3.11"), "-S",
                        "-c", script], cwd=tmp_path / "dev", capture_output=True, text=True, timeout=900,
                       env={"PYTHONPATH": f"{tmp_path / 'dev'}{os.pathsep}{info['site']}", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("model.so")  # the device library itself, not the host twin
    import onnxruntime as ort

    want = ort.InferenceSession(str(DIGITS), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    assert _cosine(np.load(tmp_path / "y.npy"), want) > 0.9999


def test_tune_plans_exactly_what_convert_plans_for_the_same_flags_and_recipe(tmp_path, cli, cache_env):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("prune: 0.25\nrecover: false\nprecision: int8\ncalib_method: percentile\n"
                      "stages: {qdq: {per_channel: false}}\n")
    flags = ["--profile", "host", "--recipe", str(recipe), "--calib", str(DATA / "digits_calib.npz"),
             "--max-accuracy-drop", "2", "--dry-run", "--json"]
    r = cli("tune", str(DIGITS), *flags, env=cache_env)
    assert r.returncode == 0, r.stderr[-2000:]
    tune_plan = json.loads(r.stdout)["plan"]
    r = cli("convert", str(DIGITS), "--backend", "tvm", *flags, env=cache_env)
    assert r.returncode == 0, r.stderr[-2000:]
    convert_plan = json.loads(r.stdout)["plan"]
    assert tune_plan["plan_hash"] == convert_plan["plan_hash"]
    stages = {s["name"]: s["config"] for s in tune_plan["stages"]}
    assert stages["prune"]["ratio"] == 0.25 and stages["qdq"]["per_channel"] is False
    assert list(stages) == ["normalize", "prune", "qdq", "tvm"]


@pytest.mark.slow
def test_bench_serves_the_tuned_artifact_after_tune(tmp_path, cli, cache_env):
    """bench's cache keys an artifact by its plan, and the plan carries the tuning database's content hash: the
    untuned build cached before 'edgeopt tune' is not served after it."""
    bench = ["bench", str(DIGITS), "--profile", "host", "--backends", "tvm", "--precision", "fp32", "--runs", "1",
             "--min-seconds", "0", "--warmup", "0", "--no-store", "--json"]

    def tvm_artifact() -> tuple[Path, dict]:
        r = cli(*bench, env=cache_env, timeout=1200)
        assert r.returncode == 0, r.stderr[-2000:]
        row = next(x for x in json.loads(r.stdout)["rows"] if x.get("backend") == "tvm" and "reference" not in
                   str(x.get("name")))
        art = Path(row["artifact"])
        return art, json.loads((art / "manifest.json").read_text())["runtime"]["settings"]["tuning"]

    untuned_dir, untuned = tvm_artifact()
    assert untuned["tuned"] is False
    r = cli("tune", str(DIGITS), "--profile", "host", "--precision", "fp32", "--trials", "2", "--json",
            env=cache_env, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    tuned_run = json.loads(r.stdout)
    tuned_dir, tuned = tvm_artifact()
    assert tuned_dir != untuned_dir, "bench served the artifact it cached before tuning"
    assert tuned["tuned"] is True and tuned["found_by"] == "cache" and tuned["key"] == tuned_run["key"]
    assert tuned["database"] == tuned_run["database"] and tuned["sha256"] not in (None, "none")
    again_dir, _ = tvm_artifact()
    assert again_dir == tuned_dir  # and the tuned build is the one cached from then on
