"""What the TFLite backend runs for a microcontroller profile, after the INT8 ``.tflite`` is made:

1. its ops against TFLite Micro's (an op TFLM lacks: exit 3, named, with its alternative);
2. the model in TFLM's interpreter on the eval samples, against FP32 ONNX Runtime under the run's accuracy
   bound (labels: the accuracy drop; else 100 - top-1 agreement with FP32; exit 5 when over);
3. the smallest arena that runs it (bisection, :func:`edgeopt.converters.backends.tflite.micro.tflm.find_arena`);
4. the C array with ``EDGEOPT_ARENA_BYTES``, the io shapes and quantization parameters in its header;
5. the array and a harness compiled for the profile's core, the flash it takes against the profile's
   (skipped, and said, without ``arm-none-eabi-gcc``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.converters.backends.tflite.micro.target import MicroTarget
from edgeopt.errors import GateFailedError

MAX_SAMPLES = 200
DEFAULT_DROP = 1.0  # points, when the run gives no --max-accuracy-drop


def _to_runtime(feed: dict, io_inputs: list[dict]) -> list[np.ndarray]:
    out = []
    for spec in io_inputs:
        x = np.asarray(feed[spec["name"]], dtype=np.float32)
        out.append(np.transpose(x, spec["transpose"]) if spec.get("transpose") else x)
    return out


def _from_runtime(outs: list[np.ndarray], io_outputs: list[dict]) -> dict:
    res = {}
    for spec, y in zip(io_outputs, outs, strict=False):
        perm = spec.get("transpose")
        res[spec["name"]] = np.transpose(y, np.argsort(perm)) if perm else y
    return res


def tflm_accuracy(tflite: Path, onnx_path: Path, io: dict, data, arena: int) -> dict:
    """TFLM against FP32 ONNX Runtime on up to :data:`MAX_SAMPLES` samples of ``data``: top-1 agreement,
    and accuracy of both where ``data`` has labels (points)."""
    from edgeopt.converters.backends.tflite.micro.tflm import details, open_tflm, run_tflm
    from edgeopt.metrics.kinds import top1_class
    from edgeopt.runtime.run_fn import run_fn

    ref = run_fn(onnx_path)
    interp = open_tflm(tflite, arena)
    out_details = details(interp.get_output_details)
    n = min(len(data), MAX_SAMPLES)
    feeds = data.feeds(n)
    labels = None if data.labels is None else np.asarray(data.labels)[:n]
    agree = right_ref = right_tflm = 0
    for k, feed in enumerate(feeds):
        want = list(ref(feed).values())[0]
        got = list(_from_runtime(run_tflm(interp, _to_runtime(feed, io["inputs"]), out_details), io["outputs"]).values())[0]
        c_ref, c_got = top1_class(np.ravel(want)), top1_class(np.ravel(got))
        agree += int(c_ref == c_got)
        if labels is not None:
            right_ref += int(c_ref == int(labels[k]))
            right_tflm += int(c_got == int(labels[k]))
    out = {"samples": n, "top1_agreement": round(100 * agree / n, 3) if n else None}
    if labels is not None and n:
        out.update(fp32_accuracy=round(100 * right_ref / n, 3), tflm_accuracy=round(100 * right_tflm / n, 3))
        out["drop"] = round(out["fp32_accuracy"] - out["tflm_accuracy"], 3)
    else:
        out["drop"] = round(100 - out["top1_agreement"], 3) if n else None
    return out


def micro_checks(tflite: Path, onnx_path: Path, runtime: dict, data, target: MicroTarget, *, bound: float | None,
                 c_name: str, out_dir: Path, profile_name: str = "") -> dict:
    """Steps 1-5 of the module doc; returns the report (``tflm``, ``c_export``, ``firmware``)."""
    from edgeopt.converters.backends.tflite.micro.firmware import INSTALL_HINT, compile_firmware, toolchain
    from edgeopt.converters.backends.tflite.micro.ops import check_tflm_ops
    from edgeopt.converters.backends.tflite.micro.tflm import ARENA_MARGIN, ARENA_RESOLUTION, find_arena
    from edgeopt.converters.c_export import write_c_array
    from edgeopt.validation_model import within_bound

    report: dict = {"ops": check_tflm_ops(tflite, profile_name)}
    first = _to_runtime(data.feeds(1)[0], runtime["io"]["inputs"])
    arena = find_arena(tflite, first)
    report["arena"] = arena
    acc = tflm_accuracy(tflite, onnx_path, runtime["io"], data, arena["arena_bytes"])
    limit = bound if bound is not None else DEFAULT_DROP
    acc["bound"] = limit
    report["accuracy"] = acc
    if acc["drop"] is not None and not within_bound(acc["drop"], limit, 100.0 / acc["samples"] if bound else 0.0):
        raise GateFailedError(f"tflite-micro: the model in TFLM's interpreter drops {acc['drop']:g} points vs FP32 "
                              f"(bound {limit:g}) on {acc['samples']} samples", "raise --max-accuracy-drop, or "
                              "keep sensitive ops float (--max-accuracy-drop searches for them)", details=acc)
    defines = {"EDGEOPT_ARENA_BYTES": str(arena["arena_bytes"]),
               "EDGEOPT_ARENA_NOTE": f'"smallest arena that ran in TFLM here (x86-64), to {ARENA_RESOLUTION} bytes, '
                                     f'margin {ARENA_MARGIN:g}"'}
    defines.update(io_defines(tflite, arena["arena_bytes"]))
    report["c_export"] = write_c_array(tflite, out_dir, c_name, defines=defines)
    if toolchain() is None:
        report["firmware"] = {"skipped": f"arm-none-eabi-gcc is not installed ({INSTALL_HINT})"}
    else:
        report["firmware"] = compile_firmware(out_dir, report["c_export"], target)
    return report


def io_defines(tflite: Path, arena_bytes: int) -> dict[str, str]:
    """``EDGEOPT_INPUT0_SHAPE {1, 8, 8, 1}``, ``_DIMS``, ``_TYPE``, ``_SCALE``, ``_ZERO_POINT`` for each input
    and output, as TFLM sees them."""
    from edgeopt.converters.backends.tflite.micro.tflm import details, open_tflm

    interp = open_tflm(tflite, arena_bytes)
    out: dict[str, str] = {}
    for kind, get in (("INPUT", interp.get_input_details), ("OUTPUT", interp.get_output_details)):
        for i, d in enumerate(details(get)):
            q = d.get("quantization_parameters") or {}
            scales, zps = q.get("scales"), q.get("zero_points")
            p = f"EDGEOPT_{kind}{i}"
            shape = [int(x) for x in d["shape"]]
            out[f"{p}_DIMS"] = str(len(shape))
            out[f"{p}_SHAPE"] = "{" + ", ".join(map(str, shape)) + "}"
            out[f"{p}_TYPE"] = np.dtype(d["dtype"]).name
            out[f"{p}_SCALE"] = f"{float(scales[0]):.9g}f" if scales is not None and len(scales) else "0.0f"
            out[f"{p}_ZERO_POINT"] = str(int(zps[0])) if zps is not None and len(zps) else "0"
    return out
