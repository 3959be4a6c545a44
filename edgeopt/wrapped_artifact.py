"""An existing model file in a backend's own format (a ``.tflite``: ``edgeopt bench model.tflite``, the shipped-model
checks) taken as an artifact: its manifest made by the one builder (:func:`edgeopt.artifact.build_manifest`) from
what the backend's hooks read of it (``BackendHooks.wrapped``), and the directory published by the one publish
function (:func:`edgeopt.outputs.publish`), so the old output stays until the new one is complete.

It lives on the orchestration side, not in a backend's folder: writing a manifest is not a stage's work (stages
import no manifest writer, ``tests/project/test_imports.py``). Nothing here is converted or validated, and the manifest
says so (``plan.note``, ``warnings``, ``profile: none``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgeopt.errors import BadModelError

WRAPPED_NOTE = "wrapped an existing model file; not converted"
WRAPPED_WARNING = "wrapped an existing model file as-is: not converted or validated by edgeopt"


def _backend_of(src: Path):
    from edgeopt.converters.registry import model_file_backend

    backend = model_file_backend(src)
    if backend is None:
        raise BadModelError(f"'{src.name}' is no backend's model file", "pass an ONNX model or an artifact directory")
    return backend


def wrapped_manifest(src: Path, *, threads: int | None = None):
    """The :class:`~edgeopt.artifact.Manifest` of ``src`` as it is: its runtime's view of its tensors (inputs with a
    guessed layout), no stages, no plan, no profile; the versions are edgeopt's and the runtime's."""
    from edgeopt import __version__
    from edgeopt.artifact import TensorInfo, build_manifest, guess_layout
    from edgeopt.converters.registry import hooks_of
    from edgeopt.files import file_sha256
    from edgeopt.manifest_types import PlanEntry, RuntimeEntry, RuntimeIO, TensorMap

    backend = _backend_of(src)
    facts = hooks_of(backend).wrapped(src, threads)
    io = RuntimeIO(**{kind: [TensorMap(name=t["name"], runtime_name=t["name"], transpose=None) for t in facts[kind]]
                      for kind in ("inputs", "outputs")})
    return build_manifest(
        backend=backend.value, precision=facts["precision"], profile="none",
        source={"path": str(src), "sha256": file_sha256(src)},
        inputs=[TensorInfo(**t, layout=guess_layout(t["shape"])) for t in facts["inputs"]],
        outputs=[TensorInfo(**t) for t in facts["outputs"]],
        runtime=RuntimeEntry(backend=backend.value, model=facts["model_file"], settings=facts["settings"], io=io),
        plan_hash="", plan=PlanEntry(note=WRAPPED_NOTE), warnings=[WRAPPED_WARNING],
        versions={"edgeopt": __version__, **facts["versions"]},
    )


def wrap_model_file(path: str | os.PathLike, out_dir: str | os.PathLike, *, threads: int | None = None) -> Path:
    """An artifact directory (manifest + the model file) for an existing model file of a backend's own format:
    written beside ``out_dir`` and published in one rename (an earlier edgeopt output there stays until then)."""
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
        shutil.copyfile(src, tmp / manifest.runtime.model)
        write_manifest(tmp, manifest)
        publish(tmp, out, force=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def wrapped_model_file(path: str | os.PathLike) -> Path:
    """``wrap_model_file`` into the artifact cache (keyed by the backend and the file's sha256); reused when
    already there."""
    from edgeopt.files import file_sha256
    from edgeopt.paths import CacheArea, cache_subdir

    out = cache_subdir(CacheArea.ARTIFACTS) / f"{_backend_of(Path(path)).value}-file-{file_sha256(path)[:24]}"
    return out if (out / "manifest.json").is_file() else wrap_model_file(path, out)
