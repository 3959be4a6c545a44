"""The artifact: a directory with ``manifest.json`` and the model files it lists (with sha256).

``write_manifest`` fills ``files`` from the directory itself, so every file the backend wrote is
hashed; ``load_artifact`` checks them again (a changed or missing file is an error, exit 3).
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from edgeopt.errors import BadInputError
from edgeopt.model import file_sha256

MANIFEST = "manifest.json"


class TensorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[Any]
    dtype: str
    layout: str | None = None  # NCHW / NHWC for 4-D image-like inputs, else None
    preprocessing: dict | None = None


class SourceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    from_torch: str | None = None  # package.module:factory when exported from PyTorch
    weights: str | None = None


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    samples: int = 0
    synthetic: bool = False


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    edgeopt_version: str
    backend: str
    precision: str
    profile: str
    source_model: SourceModel
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    runtime: dict
    stages: list[dict]
    versions: dict[str, str | None]
    files: dict[str, str] = {}
    validation: dict | None = None
    calibration: Calibration
    plan_hash: str
    plan: dict
    warnings: list[str] = []
    created: str = ""


def guess_layout(shape) -> str | None:
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape):
        return None
    if shape[1] in (1, 3, 4) and shape[3] not in (1, 3, 4):
        return "NCHW"
    if shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4):
        return "NHWC"
    return None


def tensor_infos(specs, preprocessing: dict | None = None) -> list[TensorInfo]:
    return [TensorInfo(name=t.name, shape=list(t.shape), dtype=t.dtype, layout=guess_layout(t.shape),
                       preprocessing=preprocessing) for t in specs]


def hash_files(directory: Path) -> dict[str, str]:
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            out[p.relative_to(directory).as_posix()] = file_sha256(p)
    return out


def _finite(obj):
    """Strict JSON: non-finite floats (an inf error, a NaN output) become the strings 'inf'/'nan'."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Hash the directory's files into ``manifest.files`` and write ``manifest.json`` atomically."""
    manifest = manifest.model_copy(update={"files": hash_files(directory)})
    if not manifest.created:
        manifest = manifest.model_copy(update={"created": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(_finite(manifest.model_dump(mode="json")), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, directory / MANIFEST)
    return manifest


def load_artifact(directory: str | Path, *, verify: bool = True) -> Manifest:
    """Read an artifact's manifest; with ``verify``, every listed file must exist with its sha256."""
    d = Path(directory)
    mf = d / MANIFEST
    if not mf.is_file():
        raise BadInputError(f"'{d}' is not an edgeopt artifact (no {MANIFEST})", "pass the directory 'edgeopt convert -o' wrote")
    try:
        manifest = Manifest.model_validate(json.loads(mf.read_text()))
    except Exception as err:  # noqa: BLE001 - JSON or schema errors read the same to a user
        raise BadInputError(f"{mf}: unreadable manifest ({type(err).__name__})", "re-run edgeopt convert") from err
    if verify:
        for name, digest in manifest.files.items():
            p = d / name
            if not p.is_file():
                raise BadInputError(f"artifact '{d}': file '{name}' is missing", "re-run edgeopt convert")
            if file_sha256(p) != digest:
                raise BadInputError(f"artifact '{d}': file '{name}' was changed after conversion (sha256 mismatch)",
                                    "re-run edgeopt convert")
    return manifest
