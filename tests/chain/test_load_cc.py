"""A generated ``load.cc`` compiled with g++ against the runtime's own headers and library and run the way a C++
consumer runs it: its printed outputs are edgeopt's runner's within the consumer check's tolerance.

Where the headers or library can't be had here the test is skipped with what was looked for:
- ONNX Runtime: the onnxruntime wheel's ``libonnxruntime.so.1.x`` and ONNX Runtime's C/C++ headers (Debian's
  ``libonnxruntime-dev``, which bookworm lacks: ``make ort-headers`` unpacks trixie's into
  /usr/local/include/onnxruntime; an older header runs on a newer library through the versioned C API).
- OpenVINO: the openvino wheel's include/ and libs/.
- TVM: the apache-tvm and apache-tvm-ffi wheels' headers (tvm-ffi's; the wheel's tvm/runtime/tensor.h needs a
  tvm/support/io.h it does not ship, so load.cc uses tvm-ffi's Tensor) and libtvm_runtime.so + libtvm_ffi.so.
- LiteRT: TensorFlow Lite's C++ SDK is packaged only by Debian sid (``libtensorflow-lite-dev`` 2.14; no wheel
  ships its headers), built against sid's glibc: ``make tflite-sdk`` makes a sid root with it, g++ and the aarch64
  cross compiler, and ``load.cc`` is built there (chroot, root only) and run natively and under qemu-user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeopt.artifact import load_artifact
from edgeopt.consumer.cc_io import parse_outputs
from edgeopt.convert import convert
from edgeopt.runtime.runners import open_runner

REPO = Path(__file__).resolve().parents[2]
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
MNIST_TEST = REPO / "fixtures" / "data" / "mnist_test.npz"
MNIST_CALIB = REPO / "fixtures" / "data" / "mnist_calib.npz"
ORT_INCLUDES = ("/usr/local/include/onnxruntime", "/usr/include/onnxruntime")


def _ort_include() -> Path | None:
    for d in [os.environ.get("EDGEOPT_ORT_INCLUDE"), *ORT_INCLUDES]:
        if d and (Path(d) / "onnxruntime_cxx_api.h").is_file():
            return Path(d)
    return None


def _ort_library() -> Path | None:
    import onnxruntime

    libs = sorted((Path(onnxruntime.__file__).parent / "capi").glob("libonnxruntime.so.1.*"))
    return libs[0] if libs else None


def _build_ort(source: Path, work: Path) -> Path:
    """``source`` compiled and linked as a consumer does (``-lonnxruntime``, the wheel's library under its
    soname in a folder of links)."""
    include, lib = _ort_include(), _ort_library()
    if shutil.which("g++") is None or include is None or lib is None:
        pytest.skip("needs g++, ONNX Runtime's C++ headers (make ort-headers: Debian trixie's libonnxruntime-dev "
                    "headers into /usr/local/include/onnxruntime, or EDGEOPT_ORT_INCLUDE) and the onnxruntime wheel")
    links = work / "lib"
    links.mkdir(exist_ok=True)
    for name in ("libonnxruntime.so.1", "libonnxruntime.so"):
        (links / name).unlink(missing_ok=True)
        (links / name).symlink_to(lib)
    exe = work / "load"
    subprocess.run(["g++", "-std=c++17", "-O1", str(source), f"-I{include}", f"-L{links}", "-lonnxruntime",
                    f"-Wl,-rpath,{links}", "-o", str(exe)], check=True, timeout=300, capture_output=True)
    return exe


def _feeds(n: int) -> list[dict]:
    with np.load(MNIST_TEST) as f:
        return [{"input": np.ascontiguousarray(f["input"][i:i + 1], dtype=np.float32)} for i in range(n)]


def _assert_cc_matches(exe: Path, artifact: Path, work: Path, samples: int = 3) -> None:
    m = load_artifact(artifact)
    tolerance = m.consumer_check.relative_tolerance
    assert tolerance
    with open_runner(str(artifact)) as runner:
        for i, feed in enumerate(_feeds(samples)):
            files = []
            for spec in m.inputs:
                path = work / f"{spec.name}-{i}.bin"
                np.asarray(feed[spec.name], dtype=spec.dtype).tofile(path)
                files.append(str(path))
            done = subprocess.run([str(exe), str(artifact), *files], capture_output=True, text=True, check=True,
                                  timeout=120)
            got, want = parse_outputs(done.stdout), runner.run(feed)
            assert set(got) == set(want)
            for name, ref in want.items():
                assert got[name].shape == ref.shape
                np.testing.assert_allclose(got[name], ref, rtol=0, atol=tolerance * float(np.max(np.abs(ref))))


@pytest.mark.slow
@pytest.mark.onnxruntime
@pytest.mark.parametrize(("profile", "precision"), [("host", "fp32"), ("host", "int8"), ("jetson-orin-nano", "int8")])
def test_onnxruntime_load_cc_compiles_runs_and_matches_the_runner(tmp_path, profile, precision):
    """On the Jetson preset load.cc appends TensorRT and CUDA only where this ONNX Runtime has them (a CPU wheel
    here: the CPU runs it, as edgeopt's runner does)."""
    out = tmp_path / "ort"
    convert(str(MNIST), profile, out, backend="onnxruntime", precision=precision, eval=str(MNIST_TEST),
            calib=str(MNIST_CALIB) if precision == "int8" else None)
    exe = _build_ort(out / "load.cc", tmp_path)
    _assert_cc_matches(exe, out, tmp_path)
    zeros = parse_outputs(subprocess.run([str(exe), str(out)], capture_output=True, text=True, check=True,
                                         timeout=120).stdout)
    assert set(zeros) == {o.name for o in load_artifact(out).outputs}  # no input files: zeros in, outputs out


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_onnxruntime_load_cc_refuses_an_input_file_of_the_wrong_size(tmp_path):
    out = tmp_path / "ort"
    convert(str(MNIST), "host", out, backend="onnxruntime", precision="fp32", eval=str(MNIST_TEST))
    exe = _build_ort(out / "load.cc", tmp_path)
    short = tmp_path / "short.bin"
    np.zeros(10, np.float32).tofile(short)
    done = subprocess.run([str(exe), str(out), str(short)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "expected 3136" in done.stderr


def _build_tvm(source: Path, work: Path) -> Path:
    import tvm
    import tvm_ffi

    tvm_root, ffi_root = Path(tvm.__file__).parent, Path(tvm_ffi.__file__).parent
    libs = [tvm_root / "lib" / "libtvm_runtime.so", ffi_root / "lib" / "libtvm_ffi.so"]
    if shutil.which("g++") is None or not (ffi_root / "include" / "tvm" / "ffi" / "extra" / "module.h").is_file() \
            or not all(lib.is_file() for lib in libs):
        pytest.skip("needs g++ and the apache-tvm-ffi wheel's headers, libtvm_runtime.so and libtvm_ffi.so")
    exe = work / "load"
    subprocess.run(["g++", "-std=c++17", "-O1", str(source), f"-I{ffi_root / 'include'}", f"-L{libs[0].parent}",
                    f"-L{libs[1].parent}", "-ltvm_runtime", "-ltvm_ffi", f"-Wl,-rpath,{libs[0].parent}",
                    f"-Wl,-rpath,{libs[1].parent}", "-o", str(exe)], check=True, timeout=300, capture_output=True)
    return exe


@pytest.mark.slow
@pytest.mark.tvm
def test_tvm_load_cc_compiles_runs_the_relax_vm_and_matches_the_runner(tmp_path):
    out = tmp_path / "tvm"
    convert(str(MNIST), "host", out, backend="tvm", precision="fp32", eval=str(MNIST_TEST))
    exe = _build_tvm(out / "load.cc", tmp_path)
    _assert_cc_matches(exe, out, tmp_path, samples=2)


@pytest.mark.slow
@pytest.mark.openvino
def test_openvino_load_cc_compiles_at_the_judged_hint_and_matches_the_runner(tmp_path):
    import openvino

    root = Path(openvino.__file__).parent
    libs = sorted((root / "libs").glob("libopenvino.so.*"))
    if shutil.which("g++") is None or not (root / "include" / "openvino" / "openvino.hpp").is_file() or not libs:
        pytest.skip("needs g++ and the OpenVINO wheel's C++ headers")
    out = tmp_path / "ov"
    convert(str(MNIST), "host", out, backend="openvino", precision="int8", eval=str(MNIST_TEST), calib=str(MNIST_CALIB))
    exe = tmp_path / "load"
    subprocess.run(["g++", "-std=c++17", "-O1", str(out / "load.cc"), f"-I{root / 'include'}", f"-L{root / 'libs'}",
                    f"-l:{libs[0].name}", f"-Wl,-rpath,{root / 'libs'}", "-o", str(exe)], check=True, timeout=600)
    done = subprocess.run([str(exe), str(out)], capture_output=True, text=True, check=True, timeout=120)
    assert f"INFERENCE_PRECISION_HINT {load_artifact(out).runtime.settings['inference_precision']}" in done.stdout
    _assert_cc_matches(exe, out, tmp_path)


def _litert_cc():
    """``bench/litert_cc.py``: the Debian sid root with TensorFlow Lite's C++ SDK (``make tflite-sdk``) where load.cc
    is built (chroot) and run (natively, and the aarch64 build under qemu-user)."""
    sys.path.insert(0, str(REPO / "bench"))
    import litert_cc

    why = litert_cc.available()
    if why:
        pytest.skip(f"{why}: Debian sid's libtensorflow-lite-dev is the only packaged TensorFlow Lite C++ SDK")
    return litert_cc


def _output_steps(artifact: Path) -> dict[str, float]:
    """Each ONNX output's quantization step: the scale of the int8 tensor its float output is dequantized from
    (0 for an output computed in float)."""
    from ai_edge_litert.interpreter import Interpreter

    m = load_artifact(artifact)
    interp = Interpreter(model_path=str(artifact / m.runtime.model))
    details = {d["index"]: d for d in interp.get_tensor_details()}
    producers = {o: op for op in interp._get_ops_details() for o in op["outputs"]}
    runner = interp.get_signature_runner(m.runtime.settings.get("signature") or "serving_default")
    steps = {}
    for io in m.runtime.io.outputs:
        index = runner.get_output_details()[io.runtime_name]["index"]
        op = producers.get(index)
        source = details[op["inputs"][0]] if op and op["op_name"] == "DEQUANTIZE" else details[index]
        steps[io.name] = float(source["quantization"][0])
    return steps


@pytest.mark.slow
@pytest.mark.tflite
@pytest.mark.parametrize(("precision", "arch"), [("fp32", "x86_64"), ("int8", "x86_64"), ("int8", "aarch64 (qemu-user)")])
def test_litert_load_cc_builds_against_tensorflow_lite_runs_and_matches_the_runner(tmp_path, precision, arch):
    """The pi5 artifact's load.cc built against TensorFlow Lite's C++ API (Debian's libtensorflow-lite 2.14, not
    the wheel's LiteRT 2.3 the runner uses) and run as a C++ consumer runs it, natively and as an aarch64 build under
    qemu-user: ONNX names and layout in and out. FP32 matches the runner within the consumer check's tolerance; INT8
    within one quantization step of each output (another TensorFlow Lite rounds some int8 results by one step) and
    the same top-1 class."""
    litert_cc = _litert_cc()
    out = tmp_path / "tfl"
    convert(str(MNIST), "pi5", out, precision=precision, eval=str(MNIST_TEST),
            calib=str(MNIST_CALIB) if precision == "int8" else None)
    root_dir, commands = litert_cc.build(out, arch.split()[0])
    command = commands[arch]
    m = load_artifact(out)
    steps = _output_steps(out) if precision == "int8" else {}
    with open_runner(str(out)) as runner:
        for i, feed in enumerate(_feeds(4)):
            path = root_dir / f"input-{i}.bin"
            np.asarray(feed["input"], np.float32).tofile(path)
            got = parse_outputs(subprocess.run([*command, litert_cc.inside(path, arch)], capture_output=True,
                                               text=True, check=True, timeout=300).stdout)
            want = runner.run(feed)
            assert set(got) == set(want) == {o.name for o in m.outputs}
            for name, ref in want.items():
                assert got[name].shape == ref.shape
                scale = float(np.max(np.abs(ref)))
                atol = 1.001 * steps[name] if steps.get(name) else m.consumer_check.relative_tolerance * scale
                np.testing.assert_allclose(got[name], ref, rtol=0, atol=atol)
                assert int(np.argmax(got[name])) == int(np.argmax(ref))
