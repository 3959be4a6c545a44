"""The artifact for a device benchmark made ready to upload: converted for the device's profile when given a model,
its files checked and listed with the runtime bundle."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import BadInputError
from edgeopt.options import ConvertOptions
from edgeopt.runtime.measure import read_artifact

from . import deploy
from .inventory import Device


@dataclass
class Staged:
    """The artifact ready to upload: where it is, its files' hashes, what was converted (None: given built)."""

    artifact: Path
    listed_files: dict
    converted: dict | None
    files: list
    manifest: dict


def _artifact_for(device: Device, artifact_or_model: str | Path, tmp: Path, convert_options: ConvertOptions | None,
                  progress) -> Path:
    src = Path(artifact_or_model)
    if src.is_dir():
        return src
    if src.is_file() and src.suffix == ".onnx":
        from edgeopt.convert import convert

        out = tmp / "artifact"
        convert(str(src), device.profile, str(out), convert_options or ConvertOptions())
        return out
    raise BadInputError(f"'{src}' is neither an artifact directory nor an .onnx model", "check the path")


def stage_artifact(dev: Device, artifact_or_model, tmp: Path, convert_options: ConvertOptions | None, step, inputs,
           runtime_dir) -> Staged:
    """The artifact (converted first when given a model), checked, and the files to upload with it."""
    from edgeopt.artifact import verify_artifact

    artifact = _artifact_for(dev, artifact_or_model, tmp, convert_options, step)
    listed_files = verify_artifact(artifact)  # sha256 before upload, and on the device after it
    converted = None if artifact == Path(artifact_or_model) else {
        "model": str(Path(artifact_or_model).resolve()), "profile": dev.profile,
        **(convert_options.model_dump(mode="json", exclude_unset=True) if convert_options else {})}
    return Staged(artifact, listed_files, converted, deploy.bundle_files(artifact, runtime_dir, inputs),
                   read_artifact(str(artifact)))
