"""An existing ``.tflite`` file read as it is, for :mod:`edgeopt.wrapped_artifact` to take it as an artifact: LiteRT's
view of its tensors (manifest tensor entries), its precision, and the runtime entry the runner loads it with."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from edgeopt.errors import BadModelError, UnsupportedOpError

from .convert import MODEL_FILE


def tflite_specs(path: str | os.PathLike) -> tuple[list[dict], list[dict], str]:
    """(inputs, outputs, precision) of a ``.tflite`` as manifest tensor entries; UnsupportedOpError for
    a model LiteRT cannot run (a custom op), BadModelError for a file it cannot read."""
    from edgeopt.runtime.runners.tflite import open_interpreter, unresolved_op

    try:
        interp = open_interpreter(str(path))
    except (RuntimeError, ValueError) as err:
        op = unresolved_op(str(err))
        if op:
            raise UnsupportedOpError(f"{Path(path).name}: needs the op '{op}', which LiteRT cannot run "
                                     "(a custom op not built into ai-edge-litert)",
                                     "register the op in your own LiteRT build, or use a model without it") from err
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise BadModelError(f"{Path(path).name}: not a model LiteRT can load: {first}", "check the file") from err
    sigs = interp.get_signature_list()
    if sigs:
        sig = interp.get_signature_runner(next(iter(sigs)))
        ins, outs = dict(sig.get_input_details()), dict(sig.get_output_details())
        order = sigs[next(iter(sigs))]
        ins = {n: ins[n] for n in order["inputs"]}
        outs = {n: outs[n] for n in order["outputs"]}
    else:
        ins = {d["name"]: d for d in interp.get_input_details()}
        outs = {d["name"]: d for d in interp.get_output_details()}
    quantized = any(np.dtype(d["dtype"]).kind in "iu" and d["quantization"][0] for d in {**ins, **outs}.values())

    def entry(name, d):
        dt = np.dtype(d["dtype"])
        return {"name": name, "shape": [int(x) for x in d["shape"]],
                "dtype": "float32" if dt.kind in "iu" and d["quantization"][0] else dt.name}

    return ([entry(n, d) for n, d in ins.items()], [entry(n, d) for n, d in outs.items()],
            "int8" if quantized else "fp32")


def wrapped_facts(path: Path, threads: int | None) -> dict:
    """What a wrapped ``.tflite``'s manifest says of it (see ``BackendHooks.wrapped``)."""
    from edgeopt.deps import version_of

    inputs, outputs, precision = tflite_specs(path)
    return {"inputs": inputs, "outputs": outputs, "precision": precision, "model_file": MODEL_FILE,
            "settings": {"threads": threads, "delegate": "xnnpack"},
            "versions": {"ai-edge-litert": version_of("ai-edge-litert")}}
