"""An existing ``.tflite`` file taken as an artifact (``edgeopt bench model.tflite``, the shipped-model checks):
its manifest made by the one builder (:func:`edgeopt.artifact.build_manifest`) and the directory published by the
one publish function (:func:`edgeopt.outputs.publish`), so the old output stays until the new one is complete.

It lives on the orchestration side, not in the TFLite backend: writing a manifest is not a stage's work (stages
import no manifest writer, ``tests/project/test_imports.py``). Nothing here is converted or validated, and the manifest
says so (``plan.note``, ``warnings``, ``profile: none``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from edgeopt.converters.backends.tflite.convert import MODEL_FILE
from edgeopt.enums import BackendName
from edgeopt.errors import BadModelError, UnsupportedOpError

WRAPPED_NOTE = "wrapped an existing .tflite; not converted"
WRAPPED_WARNING = "wrapped an existing .tflite as-is: not converted or validated by edgeopt"


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


def wrapped_manifest(src: Path, *, threads: int | None = None):
    """The :class:`~edgeopt.artifact.Manifest` of ``src`` as it is: LiteRT's view of its tensors (inputs with a
    guessed layout), no stages, no plan, no profile; the versions are edgeopt's and the runtime's."""
    from edgeopt import __version__
    from edgeopt.artifact import TensorInfo, build_manifest, guess_layout
    from edgeopt.deps import version_of
    from edgeopt.files import file_sha256

    inputs, outputs, precision = tflite_specs(src)
    io = {kind: [{"name": t["name"], "runtime_name": t["name"], "transpose": None} for t in specs]
          for kind, specs in (("inputs", inputs), ("outputs", outputs))}
    backend = BackendName.TFLITE.value
    return build_manifest(
        backend=backend, precision=precision, profile="none", source={"path": str(src), "sha256": file_sha256(src)},
        inputs=[TensorInfo(**t, layout=guess_layout(t["shape"])) for t in inputs],
        outputs=[TensorInfo(**t) for t in outputs],
        runtime={"backend": backend, "model": MODEL_FILE, "settings": {"threads": threads, "delegate": "xnnpack"},
                 "io": io},
        plan_hash="", plan={"note": WRAPPED_NOTE}, warnings=[WRAPPED_WARNING],
        versions={"edgeopt": __version__, "ai-edge-litert": version_of("ai-edge-litert")},
    )


def wrap_tflite(path: str | os.PathLike, out_dir: str | os.PathLike, *, threads: int | None = None) -> Path:
    """An artifact directory (manifest + ``model.tflite``) for an existing ``.tflite`` file: written beside
    ``out_dir`` and published in one rename (an earlier edgeopt output there stays until then)."""
    import tempfile

    from edgeopt.artifact import write_manifest
    from edgeopt.outputs import publish

    src, out = Path(path), Path(out_dir)
    if not src.is_file():
        raise BadModelError(f"'{src}' not found", "check the path")
    manifest = wrapped_manifest(src, threads=threads)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        shutil.copyfile(src, tmp / MODEL_FILE)
        write_manifest(tmp, manifest)
        publish(tmp, out, force=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def wrapped_tflite(path: str | os.PathLike) -> Path:
    """``wrap_tflite`` into the artifact cache (keyed by the file's sha256); reused when already there."""
    from edgeopt.files import file_sha256
    from edgeopt.paths import CacheArea, cache_subdir

    out = cache_subdir(CacheArea.ARTIFACTS) / f"tflite-file-{file_sha256(path)[:24]}"
    return out if (out / "manifest.json").is_file() else wrap_tflite(path, out)
