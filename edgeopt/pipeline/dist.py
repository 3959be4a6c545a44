"""What goes into ``dist/``: content hashes, reproducible tarballs, C arrays.

Determinism (reported in ``summary.json``; per backend in the manifest's ``determinism``, see
each backend class's ``deterministic``): the model files of ONNX Runtime and OpenVINO
artifacts are byte-identical across clean builds (checked by tests/pipeline/test_pipeline.py). The
manifest's ``created`` comes from ``$SOURCE_DATE_EPOCH`` (the pipeline sets 0 unless the user did)
and its timings live in ``build.json``, which the pipeline leaves out of ``dist/``; so the dist
artifact directory and its tarball are byte-identical across clean builds of the same inputs
(tests/pipeline/test_pipeline.py). ``content_hash`` still leaves out ``created``, ``source_model.path``
(the model's path as given) and any timings, for artifacts made by older builds. A tarball is reproducible
(sorted entries, fixed mtime ``$SOURCE_DATE_EPOCH`` or 0, owner 0, gzip without a timestamp), so
the same artifact directory always gives the same tarball bytes; a rebuild served from the cache
reuses the cached manifest, so its tarball is byte-identical too.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from edgeopt.files import atomic_path

VOLATILE_MANIFEST_KEYS = ("created", "source_model.path", "every key ending in 'seconds' (stage timings)",
                          "files['*.log'] (conversion logs carry timestamps)")


def content_hash(manifest: dict) -> str:
    """sha256 of the manifest without its volatile keys (the files' sha256 are in it)."""
    m = _without_timings(copy.deepcopy(manifest))
    m["files"] = {k: v for k, v in (m.get("files") or {}).items() if not k.endswith(".log")}
    m.pop("created", None)
    (m.get("source_model") or {}).pop("path", None)
    return hashlib.sha256(json.dumps(m, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _without_timings(obj):
    if isinstance(obj, dict):
        return {k: _without_timings(v) for k, v in obj.items() if not str(k).endswith("seconds")}
    if isinstance(obj, list):
        return [_without_timings(v) for v in obj]
    return obj


def determinism(backend: str) -> dict:
    """For manifests written before they carried ``determinism``."""
    from edgeopt.artifact import determinism_of

    return determinism_of(backend).model_dump(mode="json")


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def _runtime_dir() -> Path:
    import edgeopt.runtime

    return Path(edgeopt.runtime.__file__).parent


def _entries(artifact_dir: Path, name: str, extra_dirs: dict[str, Path]) -> list[tuple[str, Path]]:
    out = [(f"{name}/{p.relative_to(artifact_dir).as_posix()}", p) for p in artifact_dir.rglob("*") if p.is_file()]
    rt = _runtime_dir()
    out += [(f"{name}/edgeopt_runtime/{p.relative_to(rt).as_posix()}", p) for p in rt.rglob("*.py")
            if "__pycache__" not in p.parts]
    for prefix, d in extra_dirs.items():
        out += [(f"{name}/{prefix}/{p.relative_to(d).as_posix()}", p) for p in d.rglob("*") if p.is_file()]
    return sorted(out)


def write_tarball(artifact_dir: Path, out: Path, name: str, extra_dirs: dict[str, Path] | None = None) -> dict:
    """``out`` (.tar.gz): ``NAME/`` with the artifact, ``NAME/edgeopt_runtime/`` (the device-side
    runner: ``python3 -m edgeopt_runtime bench NAME``) and any ``extra_dirs``. Reproducible, atomic."""
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, path in _entries(artifact_dir, name, extra_dirs or {}):
            data = path.read_bytes()
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    with atomic_path(out) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(buf.getvalue())
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    return {"path": out.name, "sha256": digest, "bytes": out.stat().st_size}


def c_array(artifact_dir: Path, manifest: dict, out_dir: Path, name: str) -> tuple[dict | None, str | None]:
    """(files, note): the model as a C array for firmware, for a backend whose model file firmware embeds (TFLite),
    when ``converters.c_export`` exists."""
    from edgeopt.converters.registry import backend_hooks

    embeds = {b.value for b, h in backend_hooks().items() if h.firmware_c_array}
    if manifest.get("backend") not in embeds:
        return None, None
    try:
        from edgeopt.converters.c_export import write_c_array
    except ImportError:
        return None, "C array export skipped: edgeopt.converters.c_export is not available in this build"
    model = artifact_dir / manifest["runtime"]["model"]
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_c_array(model, out_dir, name), None
