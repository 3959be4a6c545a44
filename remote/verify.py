"""``convert --verify-on DEVICE``: the artifact run on a device (a board, or an emulated one) on the run's
check samples, its outputs compared with this host's run of the same artifact.

The device side is ``remote-bench``'s machinery (deploy, the shipped runner, the board lock): one
``remote_bench`` call with the samples as ``--inputs``, every sample's outputs fetched (``all_samples``),
nothing stored in the results database. The host side is the same runner code (``open_runner``) here.

Tolerance, per output, on the largest absolute difference over every element of every sample:

- float artifacts (fp32): ``1e-4 x`` the output's scale (its largest absolute value on this host);
- fp16 artifacts: ``1e-2 x`` the scale (half precision keeps ~3 digits, and a board may compute in it);
- int8 artifacts: one quantization step of the output where the output is quantized (its TFLite tensor's
  scale, or the scale of the ONNX ``DequantizeLinear`` that makes it: x86 and Arm integer kernels may round
  a requantization differently by one step); an output computed in float after int8 layers: ``1e-2 x``
  the scale;
- int8 and fp16 artifacts, at least: a quarter of the artifact's own error on those samples (the largest
  |artifact - FP32| of that output, FP32 being the source ONNX model in ONNX Runtime here). A board that rounds
  differently (dynamic INT8 quantizes activations at run time from float values that x86 and Arm compute
  with different instructions: one rounding flipped early moves the output by more than one step) then stays
  within 1.25x of the error the accuracy gate accepted; a board that computes another function (a wrong
  layout, a broken kernel) is off by about that error or the output's scale, and fails;
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
QUANT_ERROR_SHARE = 0.25  # of the artifact's own |artifact - FP32|: the most a board may add to it
FP16_REL = 1e-2
INT8_FLOAT_OUTPUT_REL = 1e-2
VERIFY_RUN = {"min_runs": 1, "warmup": 0, "min_seconds": 0.0, "store": False}  # outputs, not timings
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


def tolerance(precision: str, scale: float, step: float | None, integer: bool = False,
              own_error: float | None = None) -> tuple[float, str]:
    """(the largest allowed absolute difference, how it was set) for one output; ``integer``: the output is
    integer or boolean on this host (not a dequantized value); ``own_error``: the artifact's largest
    |artifact - FP32| on the samples (int8/fp16; None where FP32 could not be run here)."""
    if integer and not step:
        return 0.0, "equal (an integer output: ids, indices or masks)"
    if precision == "int8" and step:
        tol, how = step * (1 + 1e-6), f"1 quantization step ({step:.6g})"
    else:
        rel = {"fp32": FLOAT_REL, "fp16": FP16_REL}.get(precision, INT8_FLOAT_OUTPUT_REL)
        what = "float output of an int8 artifact: " if precision == "int8" else ""
        tol, how = rel * max(scale, 1e-12), f"{what}{rel:g} x output scale ({scale:.6g})"
    if precision != "fp32" and own_error and QUANT_ERROR_SHARE * own_error > tol:
        tol = QUANT_ERROR_SHARE * own_error
        how = f"{QUANT_ERROR_SHARE:g} x the artifact's own error vs FP32 ({own_error:.6g}; more than {how})"
    return tol, how


def compare(host: list[dict], device: dict[str, np.ndarray], precision: str, steps: dict,
            fp32: list[dict] | None = None) -> dict:
    """Per output: max |device - host| over all samples, its tolerance, and whether it holds (``fp32``: the
    source model's outputs on the same samples, for the artifact's own error)."""
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
        tol, how = tolerance(precision, float(np.max(np.abs(h[np.isfinite(h)]), initial=0.0)), steps.get(name),
                             integer=raw.dtype.kind in "iub", own_error=_own_error(h, fp32, name))
        per_output[name] = {"max_abs_diff": diff, "tolerance": tol, "rule": how,
                            "passed": diff <= tol and same_nonfinite}
    return per_output


def _own_error(host: np.ndarray, fp32: list[dict] | None, name: str) -> float | None:
    """The artifact's largest |artifact - FP32| for one output on this host (None without a comparable FP32)."""
    if not fp32 or any(name not in o for o in fp32):
        return None
    ref = np.stack([np.asarray(o[name]) for o in fp32]).astype(np.float64)
    if ref.size != host.size:
        return None
    diff = np.abs(host - ref.reshape(host.shape))
    return float(np.max(diff[np.isfinite(diff)], initial=0.0))


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
        from edgeopt.converters.quantize.bound import ort_runner

        run = ort_runner(path, threads or 2)
        return [{k: np.asarray(v) for k, v in run(samples.feed(i)).items()} for i in range(len(samples))]
    except Exception:  # noqa: BLE001 - no FP32 here: the scale-relative rule alone
        return None


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
        record = remote_bench(dev, artifact, inputs=str(inputs), outputs=str(outputs), all_samples=True,
                              devices_path=devices_path, notify=notify, runtime_dir=RUNTIME_DIR, **VERIFY_RUN)
        with np.load(outputs) as f:
            got = {k: f[k] for k in f.files}
    fp32 = fp32_outputs(artifact, samples, threads) if precision != "fp32" else None
    per_output = compare(host, got, precision, steps, fp32)
    worst = max(per_output, key=lambda k: (not per_output[k]["passed"], per_output[k]["max_abs_diff"] or 0.0))
    env = getattr(record, "environment", None) or {}
    result = {"device": dev.name, "profile": dev.profile, "emulated": dev.emulated, "samples": len(samples),
              "max_abs_diff": per_output[worst]["max_abs_diff"], "tolerance": per_output[worst]["tolerance"],
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
    return result
