"""Device profiles: a typed, frozen schema for ``device_profiles/*.yaml``.

Profiles come from the package (``edgeopt.device_profiles``), from directories
named by ``--profile-dir`` or ``EDGEOPT_PROFILE_PATH`` (``:``-separated), and
``host``, which is detected from this machine at run time (see ``edgeopt.host``).
Unknown keys are errors with a "did you mean" hint.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgeopt.enums import BackendName, Precision, SourceKind, UnitKind
from edgeopt.errors import BadProfileError, did_you_mean

PROFILE_PATH_ENV = "EDGEOPT_PROFILE_PATH"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class PeakThroughput(_Frozen):
    """Peak throughput in GOPS (1e9 operations/s; a MAC counts as 2 operations)."""

    fp32: float | None = Field(default=None, gt=0)
    fp16: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)

    def for_precision(self, precision: Precision) -> float | None:
        return getattr(self, precision.value)


class ComputeUnit(_Frozen):
    kind: UnitKind
    name: str
    cores: int = Field(gt=0)
    clock_ghz: float = Field(gt=0)
    isa: tuple[str, ...] = ()
    peak_gops: PeakThroughput
    sparse_peak_gops: PeakThroughput | None = None  # 2:4 structured sparsity, where the unit has it
    notes: str = ""


class Memory(_Frozen):
    size_gb: float = Field(gt=0)
    bandwidth_gbps: float = Field(gt=0)
    type: str = ""


class BackendTarget(_Frozen):
    """One backend the device supports, with the settings that target it."""

    name: BackendName
    unit: UnitKind = UnitKind.CPU
    # Backend-specific settings, validated by the backend itself when it runs
    # (e.g. tvm: {target: {...}}, openvino: {device: CPU}, tflite: {delegate: xnnpack, threads: 4},
    # onnxruntime: {provider: CPUExecutionProvider, threads: 4}).
    settings: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""


class DefaultChain(_Frozen):
    precision: Precision = Precision.INT8
    prune: float = Field(default=0.0, ge=0.0, lt=1.0)
    sparsity_2_4: bool = False


class RemoteDefaults(_Frozen):
    python: str = "python3"
    work_dir: str = "~/.cache/edgeopt-remote"
    arch: str = "aarch64"


class Source(_Frozen):
    kind: SourceKind
    ref: str  # document or page the number comes from
    note: str = ""


class DeviceProfile(_Frozen):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str
    arch: str  # aarch64 | x86_64
    compute_units: tuple[ComputeUnit, ...] = Field(min_length=1)
    memory: Memory
    tdp_w: float = Field(gt=0)
    backends: tuple[BackendTarget, ...] = Field(min_length=1)
    default_chain: DefaultChain = DefaultChain()
    remote: RemoteDefaults = RemoteDefaults()
    requires_static_shapes: bool = False
    sources: dict[str, Source] = Field(min_length=1)
    detected: bool = False  # True for ``host``: numbers read from this machine at run time

    @model_validator(mode="after")
    def _check(self) -> DeviceProfile:
        kinds = [u.kind for u in self.compute_units]
        if len(set(kinds)) != len(kinds):
            raise ValueError("compute_units: at most one unit of each kind (cpu, gpu, npu)")
        for b in self.backends:
            if b.unit not in kinds:
                raise ValueError(f"backend {b.name.value} targets unit {b.unit.value}, which the profile lacks")
        return self

    def unit(self, kind: UnitKind) -> ComputeUnit | None:
        return next((u for u in self.compute_units if u.kind == kind), None)

    @property
    def preferred_backend(self) -> BackendTarget:
        return self.backends[0]

    def backend(self, name: BackendName) -> BackendTarget | None:
        return next((b for b in self.backends if b.name == name), None)


# --------------------------------------------------------------------------- errors


def _field_names(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _model_at(loc: tuple) -> type[BaseModel]:
    """The pydantic model class that owns the key at ``loc`` (best effort, for hints)."""
    model: type[BaseModel] = DeviceProfile
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return model
        ann = field.annotation
        candidates = [ann, *getattr(ann, "__args__", ())]
        nxt = None
        for c in candidates:
            for inner in [c, *getattr(c, "__args__", ())]:
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    nxt = inner
        if nxt is None:
            return model
        model = nxt
    return model


def describe_validation_error(err: ValidationError, origin: str) -> BadProfileError:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    where = ".".join(str(p) for p in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        key = str(loc[-1])
        hint = did_you_mean(key, _field_names(_model_at(loc)))
        msg = f"{origin}: unknown key '{where}'"
        return BadProfileError(msg, hint or "remove it; see 'edgeopt profiles show pi5' for the schema")
    more = f" (and {len(err.errors()) - 1} more problems)" if len(err.errors()) > 1 else ""
    return BadProfileError(
        f"{origin}: '{where}': {first['msg']}{more}",
        "fix the value; 'edgeopt profiles validate FILE' checks a file",
    )


# --------------------------------------------------------------------------- loading


def parse_profile(data: Any, origin: str) -> DeviceProfile:
    if not isinstance(data, dict):
        raise BadProfileError(f"{origin}: a profile must be a YAML mapping", "see device_profiles/pi5.yaml")
    try:
        return DeviceProfile.model_validate(data)
    except ValidationError as err:
        raise describe_validation_error(err, origin) from err


def load_profile_file(path: str | os.PathLike) -> DeviceProfile:
    p = Path(path)
    if not p.is_file():
        raise BadProfileError(f"profile file '{p}' not found", "check the path")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise BadProfileError(f"{p}: not valid YAML{where}", "fix the YAML syntax") from err
    return parse_profile(data, str(p))


def _search_dirs(profile_dirs: list[str | os.PathLike] | None) -> list[Path]:
    dirs = [Path(d) for d in (profile_dirs or [])]
    env = os.environ.get(PROFILE_PATH_ENV, "")
    dirs += [Path(d) for d in env.split(os.pathsep) if d]
    return dirs


def _builtin_files() -> dict[str, Any]:
    root = resources.files("edgeopt.device_profiles")
    return {f.name[:-5]: f for f in root.iterdir() if f.name.endswith(".yaml")}


def available_profiles(profile_dirs: list[str | os.PathLike] | None = None) -> dict[str, str]:
    """name -> origin ("builtin", "detected" or a file path); user directories win over built-ins."""
    out = {name: "builtin" for name in _builtin_files()}
    out["host"] = "detected"
    for d in reversed(_search_dirs(profile_dirs)):
        if d.is_dir():
            for f in sorted(d.glob("*.yaml")):
                out[f.stem] = str(f)
    return dict(sorted(out.items()))


def load_profile(name_or_path: str, profile_dirs: list[str | os.PathLike] | None = None) -> DeviceProfile:
    """A profile by name (user dirs, then built-ins, ``host`` detected) or by YAML path."""
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return load_profile_file(name_or_path)
    for d in _search_dirs(profile_dirs):
        f = d / f"{name_or_path}.yaml"
        if f.is_file():
            return load_profile_file(f)
    if name_or_path == "host":
        from edgeopt.host import host_profile

        return host_profile()
    builtin = _builtin_files()
    if name_or_path in builtin:
        data = yaml.safe_load(builtin[name_or_path].read_text())
        return parse_profile(data, f"device_profiles/{name_or_path}.yaml")
    names = available_profiles(profile_dirs)
    hint = did_you_mean(name_or_path, names) or f"known profiles: {', '.join(names)}"
    raise BadProfileError(f"unknown device profile '{name_or_path}'", hint)


def profile_to_dict(profile: DeviceProfile) -> dict:
    return profile.model_dump(mode="json", exclude_defaults=False)
