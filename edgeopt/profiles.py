"""Device profiles: a typed, frozen schema for ``device_profiles/*.yaml``.

Profiles come from the package (``edgeopt.device_profiles``), from directories
named by ``--profile-dir`` or ``EDGEOPT_PROFILE_PATH`` (``:``-separated), and
``host``, which is detected from this machine at run time (see ``edgeopt.host``).
Unknown keys are errors with a "did you mean" hint, at any depth (inside compute units,
backends, sources), and so are duplicate YAML keys and ``sources`` entries that name no number.

``sources`` maps a number's key path to where it comes from. A path names compute units by
kind, e.g. ``compute_units.cpu.peak_gops`` (all precisions) or ``compute_units.gpu.sparse_peak_gops.int8``
(one), ``memory.bandwidth_gbps``, ``tdp_w``; the most specific entry wins (:meth:`DeviceProfile.source_for`).
ISA names are Linux ``/proc/cpuinfo`` flags (``asimddp`` = Arm dot product, ``avx512_vnni``, ``amx_int8``);
:meth:`ComputeUnit.has_feature` also understands common aliases (``dotprod``, ``neon``, ``vnni``, ``amx``).
"""

from __future__ import annotations

import os
import re
import sys
import typing
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgeopt.enums import BackendName, Precision, SourceKind, UnitKind
from edgeopt.errors import BadProfileError, did_you_mean

PROFILE_PATH_ENV = "EDGEOPT_PROFILE_PATH"

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
        return out + ["memory.size_gb", "memory.bandwidth_gbps", "tdp_w"]

    def missing_sources(self, required_only: bool = True) -> list[str]:
        """Numbers without a source. ``required_only``: only peaks, bandwidth and TDP (what a roofline uses)."""
        paths = self.number_paths()
        if required_only:
            paths = [p for p in paths if "peak_gops" in p or p in ("memory.bandwidth_gbps", "tdp_w")]
        return [p for p in paths if self.source_for(p) is None]


# --------------------------------------------------------------------------- errors


def _annotation_models(ann: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the pydantic model inside an annotation, whether the annotation is a dict of it)."""
    origin = typing.get_origin(ann)
    is_dict = origin is dict
    stack = [ann]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a, is_dict
        stack.extend(typing.get_args(a))
    return None, is_dict


def model_at(loc: tuple, root: type[BaseModel] | None = None) -> type[BaseModel]:
    """The pydantic model class under ``root`` (default: DeviceProfile) that owns the key at ``loc``."""
    model: type[BaseModel] = root or DeviceProfile
    skip_next = False
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if skip_next:  # a dict key (e.g. a ``sources`` path), not a field name
            skip_next = False
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return model
        inner, is_dict = _annotation_models(field.annotation)
        if inner is None:
            return model
        model, skip_next = inner, is_dict
    return model


def format_loc(loc: tuple) -> str:
    """``('compute_units', 0, 'peak_gops')`` -> ``compute_units[0].peak_gops``."""
    out = ""
    for part in loc:
        if isinstance(part, int) or "." in str(part):  # a list index, or a dotted ``sources`` key
            out += f"[{part!r}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _consequences_dropped(errors: list[dict]) -> list[dict]:
    """Drop errors that only follow from another: the 'missing' twin of a misspelt key, and an
    emptied list whose items failed."""
    extras = [e for e in errors if e["type"] == "extra_forbidden"]
    locs = [tuple(e["loc"]) for e in errors]

    def follows(e: dict) -> bool:
        loc = tuple(e["loc"])
        if e["type"] == "missing":
            return any(tuple(x["loc"][:-1]) == loc[:-1] and did_you_mean(str(x["loc"][-1]), [str(loc[-1])])
                       for x in extras)
        if e["type"] == "too_short":
            return any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs)
        return False

    kept = [e for e in errors if not follows(e)]
    return kept or errors


_ERROR_ORDER = {"extra_forbidden": 0, "missing": 2}


def describe_validation_error(err: ValidationError, origin: str) -> BadProfileError:
    """One line for the most useful problem (unknown keys first: a typo also makes its key 'missing')."""
    errors = sorted(_consequences_dropped(err.errors()), key=lambda e: _ERROR_ORDER.get(e["type"], 1))
    first = errors[0]
    loc = tuple(first["loc"])
    where = format_loc(loc)
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    details = {"path": where, "problems": [{"path": format_loc(tuple(e["loc"])), "message": e["msg"]} for e in errors]}
    if first["type"] == "extra_forbidden":
        key = str(loc[-1])
        hint = did_you_mean(key, _field_names(model_at(loc)))
        return BadProfileError(
            f"{origin}: unknown key '{where}'{more}",
            hint or "remove it; 'edgeopt profiles show pi5' shows a complete profile",
            details=details,
        )
    if first["type"] == "missing":
        return BadProfileError(f"{origin}: missing key '{where}'{more}", "add it; see device_profiles/pi5.yaml", details=details)
    msg = str(first["msg"]).removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {str(got)[:60]!r})"
    hint = None
    if first["type"] == "enum":
        hint = did_you_mean(str(got), re.findall(r"'([^']*)'", str(first.get("ctx", {}).get("expected", ""))))
    return BadProfileError(
        f"{origin}: '{where}': {msg}{shown}{more}",
        hint or "fix the value; 'edgeopt profiles validate FILE' checks a file",
        details=details,
    )


def _field_names(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def check_source_keys(profile: DeviceProfile, origin: str) -> None:
    """Every ``sources`` key must name a number (or a group of numbers) of this profile."""
    numbers = profile.number_paths()
    known = set(numbers)
    for path in numbers:  # parents too: compute_units.cpu.peak_gops covers all its precisions
        parts = path.split(".")
        known.update(".".join(parts[:n]) for n in range(1, len(parts)))
    for key in profile.sources:
        if key not in known:
            raise BadProfileError(
                f"{origin}: sources: '{key}' names no number in this profile",
                did_you_mean(key, sorted(known)) or f"key paths look like {numbers[0]} or memory.bandwidth_gbps",
                details={"path": f"sources.{key}"},
            )


# --------------------------------------------------------------------------- loading


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def read_yaml(text: str, origin: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise BadProfileError(f"{origin}: not valid YAML{where}: {problem}", "fix the YAML") from err


def parse_profile(data: Any, origin: str) -> DeviceProfile:
    if not isinstance(data, dict):
        raise BadProfileError(f"{origin}: a profile must be a YAML mapping", "see device_profiles/pi5.yaml")
    try:
        profile = DeviceProfile.model_validate(data)
    except ValidationError as err:
        raise describe_validation_error(err, origin) from err
    check_source_keys(profile, origin)
    return profile


def load_profile_file(path: str | os.PathLike) -> DeviceProfile:
    p = Path(path)
    if not p.is_file():
        raise BadProfileError(f"profile file '{p}' not found", "check the path")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BadProfileError(f"{p}: cannot read the profile ({type(err).__name__})", "check the file") from err
    return parse_profile(read_yaml(text, str(p)), str(p))


def _search_dirs(profile_dirs: list[str | os.PathLike] | None) -> list[Path]:
    """``--profile-dir`` directories (which must exist), then ``EDGEOPT_PROFILE_PATH`` ones."""
    dirs = []
    for d in profile_dirs or []:
        if not Path(d).is_dir():
            raise BadProfileError(f"profile directory '{d}' not found", "check --profile-dir")
        dirs.append(Path(d))
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
    """A profile by name (user dirs, then built-ins, ``host`` detected), alias, family or YAML path.

    A family name picks its default member and says so once on stderr (:func:`resolve_profile`
    returns the choice instead, for callers that record it)."""
    profile, choice = resolve_profile(name_or_path, profile_dirs)
    if choice.via == "family" and name_or_path not in _ANNOUNCED:
        _ANNOUNCED.add(name_or_path)
        sys.stderr.write(f"edgeopt: note: {choice.note}\n")
    return profile


def resolve_profile(name_or_path: str, profile_dirs: list[str | os.PathLike] | None = None
                    ) -> tuple[DeviceProfile, ProfileChoice]:
    """(the profile, how ``name_or_path`` reached it). Exact names win over aliases and families."""
    exact = _load_exact(name_or_path, profile_dirs)
    if exact is not None:
        return exact, ProfileChoice(name_or_path, exact.name, "name")
    index = profile_index(profile_dirs)
    choice = index.get(name_or_path)
    if choice is None:
        hint = did_you_mean(name_or_path, index) or f"known profiles: {', '.join(available_profiles(profile_dirs))}"
        raise BadProfileError(f"unknown device profile '{name_or_path}'", hint)
    if choice.via == "family" and not choice.name:
        raise BadProfileError(
            f"profile family '{name_or_path}' has no default member",
            f"pick one: {', '.join(choice.members)} (or set family_default: true in one of them)",
        )
    profile = _load_exact(choice.name, profile_dirs)
    assert profile is not None  # the index was built from loadable profiles
    return profile, choice


def _load_exact(name_or_path: str, profile_dirs) -> DeviceProfile | None:
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return load_profile_file(name_or_path)
    for d in _search_dirs(profile_dirs):
        f = d / f"{name_or_path}.yaml"
        if f.is_file():
            profile = load_profile_file(f)
            if profile.name != name_or_path:
                raise BadProfileError(
                    f"{f}: the file is named '{name_or_path}' but declares name '{profile.name}'",
                    f"rename the file to {profile.name}.yaml or set name: {name_or_path}",
                )
            return profile
    if name_or_path == "host":
        from edgeopt.host import host_profile_data

        return parse_profile(host_profile_data(), "host (detected)")
    builtin = _builtin_files()
    if name_or_path in builtin:
        origin = f"device_profiles/{name_or_path}.yaml"
        return parse_profile(read_yaml(builtin[name_or_path].read_text(encoding="utf-8"), origin), origin)
    return None


# --------------------------------------------------------------------------- families and aliases

_ANNOUNCED: set[str] = set()  # family names already explained on stderr in this process


@dataclass(frozen=True)
class ProfileChoice:
    """How a typed name reached a profile: ``via`` is "name", "alias" or "family"."""

    requested: str
    name: str  # the profile chosen ("" for a family without a default member)
    via: str
    family: str | None = None
    members: tuple[str, ...] = ()

    @property
    def note(self) -> str | None:
        if self.via != "family":
            return None
        others = [m for m in self.members if m != self.name]
        pick = f"; for another member give --profile {' or '.join(others)}" if others else ""
        return f"'{self.requested}' is a profile family: using its default member '{self.name}'{pick}"


def profile_index(profile_dirs: list[str | os.PathLike] | None = None) -> dict[str, ProfileChoice]:
    """Every name a user may type (profile names, aliases, families) -> its :class:`ProfileChoice`.

    Profiles that fail to load are left out (naming them gives their own error). An alias claimed
    by two profiles, or a family or alias that is also another profile's alias or family, is an error."""
    profiles: dict[str, DeviceProfile] = {}
    origins = available_profiles(profile_dirs)
    for name in origins:
        if name == "host":
            continue
        try:
            p = _load_exact(name, profile_dirs)
        except BadProfileError:
            continue
        if p is not None:
            profiles[name] = p
    index: dict[str, ProfileChoice] = {n: ProfileChoice(n, n, "name") for n in origins}
    claimed: dict[str, str] = {}  # alias or family -> who claims it (for the conflict message)

    def claim(word: str, owner: str) -> None:
        if word in claimed and claimed[word] != owner:
            raise BadProfileError(
                f"the profile name '{word}' is claimed twice: {claimed[word]} and {owner}",
                "remove it from one of them (aliases and families must name one profile or family)",
                details={"name": word, "claims": [claimed[word], owner]},
            )
        claimed[word] = owner

    families: dict[str, list[DeviceProfile]] = {}
    for p in profiles.values():
        where = origins.get(p.name, "")
        for a in p.aliases:
            claim(a, f"alias of {p.name} ({where})")
        if p.family:
            families.setdefault(p.family, []).append(p)
    for fam, members in families.items():
        claim(fam, f"family of {', '.join(m.name for m in members)}")
        defaults = [m.name for m in members if m.family_default]
        if len(defaults) > 1:
            raise BadProfileError(f"profile family '{fam}' has {len(defaults)} default members: {', '.join(defaults)}",
                                  "set family_default: true in only one of them")
        names = tuple(sorted(m.name for m in members))
        default = defaults[0] if defaults else (names[0] if len(names) == 1 else "")
        if fam not in index:  # an exact profile name wins
            index[fam] = ProfileChoice(fam, default, "family", fam, names)
    for p in profiles.values():
        for a in p.aliases:
            if a not in index:
                index[a] = ProfileChoice(a, p.name, "alias", p.family)
    return dict(sorted(index.items()))


def profile_to_dict(profile: DeviceProfile) -> dict:
    return profile.model_dump(mode="json", exclude_defaults=False)
