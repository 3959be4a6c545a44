"""``convert --verify-on DEVICE``: the artifact run on a device (a board, or an emulated one) on the run's
check samples, its outputs compared with this host's run of the same artifact.

The device side is ``remote-bench``'s machinery (deploy, the shipped runner, the board lock): one
``remote_bench`` call with the samples as ``--inputs``, every sample's outputs fetched (``all_samples``),
nothing stored in the results database. The host side is the same runner code (``open_runner``) here.

Tolerance, per output, on the largest absolute difference over every element of every sample:

- float artifacts (fp32): ``1e-4 x`` the output's scale (its largest absolute value on this host), or, beyond
  that, a relative L2 difference (``|device - host| / |host|`` over the whole output) of at most ``1e-4``: another
  CPU's float kernels (NEON against AVX-512, another summation order) move single elements of large, deep outputs
  further (a pose model's 256x256 segmentation logits on the emulated Cortex-A72: one element 0.75 of a scale
  of 1738, 4.3e-4 of it, with the whole output 2.5e-5 apart); a wrong layout or a broken kernel is ~1 apart;
- fp16 artifacts: ``1e-2 x`` the scale (half precision keeps ~3 digits, and a board may compute in it);
- int8 artifacts: one quantization step of the output where the output is quantized (its TFLite tensor's
  scale, or the scale of the ONNX ``DequantizeLinear`` that makes it: x86 and Arm integer kernels may round
  a requantization differently by one step); an output computed in float after int8 layers: ``1e-2 x``
  the scale;
- int8 and fp16 artifacts whose output differs by more than that: it still holds when the board's output
  is no further from FP32 than this host's (the relative L2 error vs FP32, the source ONNX model run here in
  ONNX Runtime, at most 1.25x this host's on the same samples). A board may round differently (dynamic INT8
  quantizes activations at run time from float values that x86 and Arm compute with different instructions:
  one rounding flipped early moves the output by several steps) and be exactly as accurate: MiniLM's dynamic
  INT8 on the emulated pi5 differed by up to 0.006 (TFLite) and 0.0034 (ONNX Runtime) where 1e-2 x the scale
  is 0.002, with the same error vs FP32 as here to three digits. A board that computes another function (a
  wrong layout, a broken kernel) moves away from FP32 and fails;
- integer or boolean outputs that are not quantized values (class ids, indices, token ids, masks): equal,
  whatever the precision: one off is another class, not a rounding.

A difference above it fails the run (exit 5) naming the output; nothing is published.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from edgeopt.errors import GateFailedError, RemoteError

from .inventory import Device, get_device

FLOAT_REL = 1e-4
FLOAT_L2_REL = 1e-4  # fp32: the whole output's relative L2 difference, where single elements differ more
BOARD_ERROR_RATIO = 1.25  # int8/fp16: the board's error vs FP32 at most this x this host's (relative L2)
FP16_REL = 1e-2
INT8_FLOAT_OUTPUT_REL = 1e-2
VERIFY_RUN = {"min_runs": 1, "warmup": 0, "min_seconds": 0.0, "store": False}  # outputs, not timings
CONSUMER_KEY = "consumer_check"  # the result's load.py-on-the-device entry (the manifest's consumer_check.on_devices)
RUNTIME_DIR: Path | None = None  # the runner package shipped to the device (None: edgeopt's own edgeopt/runtime)


def check_verify_device(name: str, devices_path=None) -> Device:
    """Before any work: the device exists (else exit 3, as every command) and, when emulated, is running
    (else exit 6 saying how to start it)."""
    dev = get_device(name, devices_path)
    if dev.emulated:
        from edgeopt.host import pid_alive

        from .emulate import emulator_status

        state = next((s for s in emulator_status() if s["name"] == name), None)
        if state is None or not pid_alive(state.get("pid")):
            named = "" if name == f"{dev.profile}-emu" else f" --name {name}"
            raise RemoteError(f"the emulated device '{name}' is not running (--verify-on {name})",
                              f"start it first: edgeopt emulate start {dev.profile}{named}")
    return dev


def _host_outputs(artifact: Path, samples, threads) -> tuple[list[dict], dict[str, float | None]]:
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(artifact), threads=threads) as runner:
        outs = [{k: np.asarray(v) for k, v in runner.run(samples.feed(i)).items()} for i in range(len(samples))]
        steps = output_steps(runner, artifact)
    return outs, steps


def output_steps(runner, artifact: Path) -> dict[str, float | None]:
    """Each ONNX-named output's quantization step, when the artifact's output tensor is quantized."""
    steps: dict[str, float | None] = {}
    details = getattr(runner, "_out_details", None)  # the tflite runner: runtime name -> tensor detail
    for io in getattr(runner, "_io_out", None) or []:
        steps[io["name"]] = None
        detail = (details or {}).get(io.get("runtime_name") or io["name"])
        if detail and np.dtype(detail["dtype"]).kind in "iu" and (detail.get("quantization") or (0.0,))[0]:
            steps[io["name"]] = float(detail["quantization"][0])
    model = artifact / runner.runtime["model"] if hasattr(runner, "runtime") else None
    if model is not None and model.suffix == ".onnx":
        steps.update(_onnx_output_steps(model))
    return steps


def _onnx_output_steps(model: Path) -> dict[str, float | None]:
    import onnx
    from onnx import numpy_helper

    g = onnx.load(str(model), load_external_data=False).graph
    inits = {t.name: t for t in g.initializer}
    made_by = {o: n for n in g.node for o in n.output}
    consts = {n.output[0]: n.attribute[0].t for n in g.node if n.op_type == "Constant" and n.attribute}
    steps: dict[str, float | None] = {}
    for out in g.output:
        node = made_by.get(out.name)
        scale = None
        if node is not None and node.op_type == "DequantizeLinear":
            scale = inits[node.input[1]] if node.input[1] in inits else consts.get(node.input[1])
        steps[out.name] = float(np.max(numpy_helper.to_array(scale))) if scale is not None else None
    return steps


def tolerance(precision: str, scale: float, step: float | None, integer: bool = False) -> tuple[float, str]:
    """(the largest allowed absolute difference, how it was set) for one output; ``integer``: the output is
    integer or boolean on this host (not a dequantized value)."""
    if integer and not step:
        return 0.0, "equal (an integer output: ids, indices or masks)"
    if precision == "int8" and step:
        return step * (1 + 1e-6), f"1 quantization step ({step:.6g})"
    rel = {"fp32": FLOAT_REL, "fp16": FP16_REL}.get(precision, INT8_FLOAT_OUTPUT_REL)
    what = "float output of an int8 artifact: " if precision == "int8" else ""
    return rel * max(scale, 1e-12), f"{what}{rel:g} x output scale ({scale:.6g})"


def compare(host: list[dict], device: dict[str, np.ndarray], precision: str, steps: dict,
            fp32: list[dict] | None = None) -> dict:
    """Per output: max |device - host| over all samples, its tolerance, and whether it holds; an int8/fp16
    output beyond it is judged by its error vs ``fp32`` (the source model's outputs on the same samples)."""
    per_output = {}
    for name in host[0]:
        raw = np.stack([o[name] for o in host])
        h = raw.astype(np.float64)
        if name not in device:
            raise RemoteError(f"the device returned no output '{name}' (it returned {', '.join(device) or 'none'})")
        d = np.asarray(device[name], np.float64)
        if d.shape != h.shape:
            per_output[name] = {"max_abs_diff": None, "tolerance": None, "passed": False,
                                "why": f"shape {list(d.shape)} on the device vs {list(h.shape)} here"}
            continue
        finite = np.isfinite(h) & np.isfinite(d)
        diff = float(np.max(np.abs(d - h)[finite])) if finite.any() else 0.0
        same_nonfinite = bool(np.array_equal(np.isfinite(h), np.isfinite(d)))
        integer = raw.dtype.kind in "iub"
        tol, how = tolerance(precision, float(np.max(np.abs(h[np.isfinite(h)]), initial=0.0)), steps.get(name),
                             integer=integer)
        out = per_output[name] = {"max_abs_diff": diff, "tolerance": tol, "rule": how,
                                  "passed": diff <= tol and same_nonfinite}
        if not out["passed"] and same_nonfinite and not integer:
            out.update(as_close_overall(h, d, how) if precision == "fp32" else as_accurate(h, d, fp32, name, how))
    return per_output


def as_close_overall(host: np.ndarray, device: np.ndarray, first_rule: str) -> dict:
    """The second rule of an fp32 output: the whole output's relative L2 difference at most ``FLOAT_L2_REL``."""
    finite = np.isfinite(host) & np.isfinite(device)
    norm = float(np.linalg.norm(host[finite])) or 1.0
    rel = float(np.linalg.norm((device - host)[finite])) / norm
    return {"relative_l2": rel, "passed": rel <= FLOAT_L2_REL,
            "rule": f"{first_rule}, or a relative L2 difference of at most {FLOAT_L2_REL:g} (here {rel:.3g})"}


def as_accurate(host: np.ndarray, device: np.ndarray, fp32: list[dict] | None, name: str, first_rule: str) -> dict:
    """The second rule of an int8/fp16 output: the board's relative L2 error vs FP32 at most
    ``BOARD_ERROR_RATIO`` x this host's (nothing, i.e. not passed, without a comparable FP32 output)."""
    if not fp32 or any(name not in o for o in fp32):
        return {}
    ref = np.stack([np.asarray(o[name]) for o in fp32]).astype(np.float64)
    if ref.size != host.size or not np.isfinite(ref).all():
        return {}
    ref = ref.reshape(host.shape)
    norm = float(np.linalg.norm(ref)) or 1.0
    here, board = float(np.linalg.norm(host - ref)) / norm, float(np.linalg.norm(device - ref)) / norm
    return {"error_vs_fp32": {"here": here, "board": board, "allowed": BOARD_ERROR_RATIO * here,
                              "measure": "relative L2 error vs FP32 over every sample"},
            "passed": board <= BOARD_ERROR_RATIO * here,
            "rule": f"beyond {first_rule}, so judged by its error vs FP32: relative L2 {board:.4g} on the board, "
                    f"{here:.4g} here (at most {BOARD_ERROR_RATIO:g}x)"}


def fp32_outputs(artifact: Path, samples, threads) -> list[dict] | None:
    """The source ONNX model's outputs (ONNX Runtime, this host) on ``samples``: the reference of an int8 or
    fp16 artifact's own error. None when the manifest's source is not an ONNX file here with its recorded hash."""
    import hashlib
    import json

    src = (json.loads((artifact / "manifest.json").read_text()).get("source_model") or {})
    path = Path(src.get("path") or "")
    if path.suffix != ".onnx" or not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != src.get("sha256"):
        return None
    try:
        from edgeopt.runtime.run_fn import run_fn

        run = run_fn(path, threads or 2)
        return [{k: np.asarray(v) for k, v in run(samples.feed(i)).items()} for i in range(len(samples))]
    except Exception:  # noqa: BLE001 - no FP32 here: the scale-relative rule alone
        return None


def install_hint(dev: Device) -> str:
    if dev.emulated:
        return (f"the emulated board's runtimes are set up when it starts: edgeopt emulate stop {dev.name}, then "
                f"edgeopt emulate start {dev.profile}")
    return (f"install it on the board once: edgeopt remote-bench {dev.name} ARTIFACT --setup (--wheels DIR for "
            "a board without internet), then rerun")


def verify_on(artifact: Path, device: str | Device, samples, precision: str, *, threads=None, devices_path=None,
              notify=None) -> dict:
    """Run ``artifact`` on ``device`` and here on ``samples`` (a Dataset); the manifest's ``verified_on``.
    A difference beyond the tolerance is exit 5 naming the output."""
    from .bench import remote_bench

    dev = device if isinstance(device, Device) else check_verify_device(device, devices_path)
    host, steps = _host_outputs(artifact, samples, threads)
    with tempfile.TemporaryDirectory(prefix="edgeopt-verify-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.npz", Path(tmp) / "device_outputs.npz"
        np.savez(inputs, **samples.arrays)
        try:
            record = remote_bench(dev, artifact, inputs=str(inputs), outputs=str(outputs), all_samples=True,
                                  devices_path=devices_path, notify=notify, runtime_dir=RUNTIME_DIR, **VERIFY_RUN)
        except RemoteError as err:
            if "is not installed" in err.message:  # remote-bench's own hint names a flag convert doesn't have
                err.hint = install_hint(dev)
            raise
        with np.load(outputs) as f:
            got = {k: f[k] for k in f.files}
    fp32 = fp32_outputs(artifact, samples, threads) if precision != "fp32" else None
    per_output = compare(host, got, precision, steps, fp32)
    worst = max(per_output, key=lambda k: (not per_output[k]["passed"], per_output[k]["max_abs_diff"] or 0.0))
    env = getattr(record, "environment", None) or {}
    result = {"device": dev.name, "profile": dev.profile, "emulated": dev.emulated, "samples": len(samples),
              "max_abs_diff": per_output[worst]["max_abs_diff"], "tolerance": per_output[worst]["tolerance"],
              "rule": per_output[worst].get("rule"), "error_vs_fp32": per_output[worst].get("error_vs_fp32"),
              "passed": all(o["passed"] for o in per_output.values()), "outputs": per_output,
              "device_arch": (env.get("cpu") or {}).get("arch"),
              "runtime": "the artifact's runtime on the device (emulated: qemu-user on this host)" if dev.emulated
              else "the artifact's runtime on the device"}
    if not result["passed"]:
        o = per_output[worst]
        why = o.get("why") or f"max |diff| {o['max_abs_diff']:.3g} > tolerance {o['tolerance']:.3g} ({o['rule']})"
        raise GateFailedError(f"--verify-on {dev.name}: output '{worst}' differs from this host's run: {why}",
                              "the artifact was not written; rerun with --precision fp32 to see whether the "
                              "board's runtime or the quantization differs", details={"verified_on": result})
    result[CONSUMER_KEY] = load_py_on_device(dev, artifact, samples, host, precision, steps, fp32,
                                             device_arch=result["device_arch"], runtime=_runtime_there(artifact, env),
                                             notify=notify)
    return result


def load_py_on_device(dev: Device, artifact: Path, samples, host: list[dict], precision: str, steps: dict,
                      fp32: list[dict] | None, *, device_arch: str | None = None, runtime: str | None = None,
                      notify=None) -> dict:
    """The manifest's ``consumer_check.on_devices`` entry for ``dev`` (a ``DeviceLoad`` as JSON): the artifact's
    ``load.py`` run there (:mod:`.consumer`) against ``host`` (edgeopt's runner here, one dict per sample) under
    :func:`compare`'s rule; exit 5 when an output differs."""
    from edgeopt.consumer.model import DeviceLoad

    from . import consumer

    base = {"where": dev.name, "how": consumer.how_run(dev, device_arch), "emulated": dev.emulated,
            "device_arch": device_arch, "runtime": runtime}
    skipped = consumer.not_checked(artifact)
    if skipped:
        return DeviceLoad(**base, skipped=skipped).model_dump(mode="json")
    with tempfile.TemporaryDirectory(prefix="edgeopt-consumer-device-") as tmp:
        inputs, outputs = Path(tmp) / consumer.INPUTS, Path(tmp) / consumer.OUTPUTS
        np.savez(inputs, **consumer.stacked(samples))
        applied = consumer.run_load_py(dev, artifact, inputs, outputs, install_hint=install_hint(dev), notify=notify)
        with np.load(outputs) as f:
            got = {k: f[k] for k in f.files}
    per_output = compare(host, got, precision, steps, fp32)
    worst = max(per_output, key=lambda k: (not per_output[k]["passed"], per_output[k]["max_abs_diff"] or 0.0))
    o = per_output[worst]
    record = DeviceLoad(**base, applied={k: v for k, v in applied.items() if k != "bare"}, samples=len(samples),
                        max_abs_diff=o["max_abs_diff"], tolerance=o["tolerance"], worst_output=worst,
                        rule=o.get("rule") or o.get("why"), passed=all(v["passed"] for v in per_output.values()))
    if not record.passed:
        why = o.get("why") or f"max |diff| {o['max_abs_diff']:.3g} > tolerance {o['tolerance']:.3g} ({o['rule']})"
        raise GateFailedError(
            f"consumer check on {dev.name}: {consumer.LOAD_PY} output '{worst}' differs from edgeopt's runner on this "
            f"host: {why}", "nothing was written; the artifact loaded through its runtime's plain API on the device "
                            "computes another result than edgeopt's runner",
            details={"consumer_check": record.model_dump(mode="json"), "outputs": per_output})
    return record.model_dump(mode="json")


def _runtime_there(artifact: Path, env: dict) -> str | None:
    """The artifact's runtime and its version on the device, as the device's runner reported it."""
    import json

    from edgeopt.consumer.check import runtime_package

    backend = (json.loads((artifact / "manifest.json").read_text()).get("runtime") or {}).get("backend")
    package = runtime_package(backend) if backend else backend
    version = (env.get("libraries") or {}).get(package)
    return f"{package} {version}" if package and version else package
