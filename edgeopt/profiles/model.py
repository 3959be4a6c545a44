"""The device profile's schema: frozen pydantic models, unknown keys rejected at any depth.

ISA names are Linux ``/proc/cpuinfo`` flags (``asimddp`` = Arm dot product, ``avx512_vnni``, ``amx_int8``);
:meth:`ComputeUnit.has_feature` also understands common aliases (``dotprod``, ``neon``, ``vnni``, ``amx``).
``sources`` maps a number's key path to where it comes from (:meth:`DeviceProfile.source_for`).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgeopt.enums import BackendName, Precision, SourceKind, UnitKind

# alias -> the /proc/cpuinfo flags that provide it
ISA_ALIASES: dict[str, tuple[str, ...]] = {
    "neon": ("asimd", "neon"),
    "dotprod": ("asimddp", "dotprod"),
    "fp16": ("asimdhp", "fphp", "avx512_fp16"),
    "i8mm": ("i8mm",),
    "vnni": ("avx512_vnni", "avx_vnni"),
    "amx": ("amx_int8", "amx_bf16", "amx_tile"),
    "avx512": ("avx512f",),
}


NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


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

    def has_feature(self, feature: str) -> bool:
        """Whether the unit's ISA list has ``feature`` (a cpuinfo flag or an alias such as ``dotprod``)."""
        names = ISA_ALIASES.get(feature.lower(), (feature.lower(),))
        return any(n in self.isa for n in names)


class Memory(_Frozen):
    """The device's memory. A board with DRAM states ``size_gb``; a microcontroller states its on-chip
    ``sram_kb`` (where the tensor arena lives) and ``flash_kb`` (where the model and code live).
    ``budget_mb``: the share of RAM a model may take (weights + arena + runtime), the rest being the
    application's; absent, the whole RAM (``--memory-budget`` overrides both)."""

    size_gb: float | None = Field(default=None, gt=0)
    bandwidth_gbps: float = Field(gt=0)
    type: str = ""
    sram_kb: float | None = Field(default=None, gt=0)
    flash_kb: float | None = Field(default=None, gt=0)
    budget_mb: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _ram_stated(self) -> Memory:
        if self.size_gb is None and self.sram_kb is None:
            raise ValueError("memory: give size_gb (DRAM) or sram_kb (a microcontroller's SRAM)")
        return self

    @property
    def ram_bytes(self) -> int:
        """The RAM a model runs in: DRAM where stated, else the microcontroller's SRAM."""
        return int(self.size_gb * 1e9) if self.size_gb is not None else int(self.sram_kb * 1024)

    @property
    def flash_bytes(self) -> int | None:
        return int(self.flash_kb * 1024) if self.flash_kb is not None else None

    @property
    def budget_bytes(self) -> int:
        """What a model may take: ``budget_mb`` where stated, else all of the RAM."""
        return int(self.budget_mb * 1e6) if self.budget_mb is not None else self.ram_bytes

    @property
    def is_microcontroller(self) -> bool:
        return self.sram_kb is not None and self.size_gb is None


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
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    # the names users type: a family (``jetson-orin``) resolves to its member with ``family_default: true``
    # and says so on stderr; aliases (``rpi5``, ``orin-nano``) resolve silently (see resolve_profile)
    family: str | None = Field(default=None, pattern=NAME_PATTERN)
    family_default: bool = False
    aliases: tuple[str, ...] = ()
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
        for a in self.aliases:
            if not re.match(NAME_PATTERN, a):
                raise ValueError(f"aliases: '{a}' is not a profile name (lower-case letters, digits, '.', '_', '-')")
        if self.name in self.aliases or (self.family and self.family in (self.name, *self.aliases)):
            raise ValueError("aliases and family must differ from the profile's own name")
        if self.family_default and not self.family:
            raise ValueError("family_default needs a family")
        return self

    def unit(self, kind: UnitKind) -> ComputeUnit | None:
        return next((u for u in self.compute_units if u.kind == kind), None)

    @property
    def preferred_backend(self) -> BackendTarget:
        return self.backends[0]

    def backend(self, name: BackendName) -> BackendTarget | None:
        return next((b for b in self.backends if b.name == name), None)

    def source_for(self, path: str) -> Source | None:
        """The most specific ``sources`` entry for the number at ``path`` (or a parent path)."""
        parts = path.split(".")
        for n in range(len(parts), 0, -1):
            src = self.sources.get(".".join(parts[:n]))
            if src is not None:
                return src
        return None

    def number_paths(self) -> list[str]:
        """Key paths of the numbers this profile states (what ``sources`` should cover)."""
        out = []
        for u in self.compute_units:
            base = f"compute_units.{u.kind.value}"
            out += [f"{base}.cores", f"{base}.clock_ghz"]
            for field in ("peak_gops", "sparse_peak_gops"):
                peaks = getattr(u, field)
                if peaks is not None:
                    out += [f"{base}.{field}.{p}" for p, v in peaks.model_dump().items() if v is not None]
        mem = [f"memory.{k}" for k in ("size_gb", "sram_kb", "flash_kb", "budget_mb")
               if getattr(self.memory, k) is not None]
        return out + mem + ["memory.bandwidth_gbps", "tdp_w"]

    def missing_sources(self, required_only: bool = True) -> list[str]:
        """Numbers without a source. ``required_only``: peaks, memory and TDP (what a roofline and the memory gate
        use)."""
        paths = self.number_paths()
        if required_only:
            paths = [p for p in paths if "peak_gops" in p or p.startswith("memory.") or p == "tdp_w"]
        return [p for p in paths if self.source_for(p) is None]


def profile_to_dict(profile: DeviceProfile) -> dict:
    return profile.model_dump(mode="json", exclude_defaults=False)
