"""The device inventory: ``devices.toml`` (``$EDGEOPT_CONFIG_DIR`` or ``~/.config/edgeopt``).

```toml
[devices."pi5-lab"]
host = "10.0.0.7"
user = "pi"
key = "~/.ssh/id_ed25519"
profile = "pi5"
```

Read with tomllib, written by the small writer below (atomically: temp file, then rename).
"""

from __future__ import annotations

import os
import re
import sys
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from edgeopt.errors import BadInputError, UsageError, did_you_mean
from edgeopt.files import read_text_file, write_text_atomic

from .paths import default_devices_file

NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise UsageError(
            f"invalid device name {name!r}",
            "use letters, digits, '.', '_' and '-' only (e.g. pi5-lab)",
        )
    return name


class TransportKind(str, Enum):
    """How a device is reached: ``ssh`` to a fixed host, or a ``labgrid`` place (a board farm: the
    place's NetworkService names the SSH address when the place is acquired)."""

    SSH = "ssh"
    LABGRID = "labgrid"


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    transport: TransportKind = TransportKind.SSH
    host: str | None = Field(default=None, min_length=1)  # ssh: required; labgrid: from the place
    port: int | None = Field(default=None, ge=1, le=65535)  # None: ~/.ssh/config or 22
    user: str | None = None  # None: ~/.ssh/config or the local user
    key: str | None = None  # private key file; None: agent and default keys
    profile: str = Field(min_length=1)
    python: str = "python3"  # may carry arguments ("python3 -X utf8"); split with shlex
    work_dir: str = "~/.cache/edgeopt-remote"
    emulated: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    known_hosts: str | None = None  # an extra known_hosts file (emulated devices have their own)
    # labgrid: a coordinator (HOST:PORT) and either one place or tags that any free place may match
    coordinator: str | None = None
    labgrid_place: str | None = None
    labgrid_tags: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _kind(self) -> Device:
        labgrid = (self.coordinator, self.labgrid_place, self.labgrid_tags)
        if self.transport == TransportKind.SSH:
            if not self.host:
                raise ValueError("an ssh device needs a host")
            if any(labgrid):
                raise ValueError("coordinator/labgrid_place/labgrid_tags need transport = \"labgrid\"")
        else:
            if not self.coordinator:
                raise ValueError("a labgrid device needs a coordinator (HOST:PORT)")
            if bool(self.labgrid_place) == bool(self.labgrid_tags):
                raise ValueError("a labgrid device needs either labgrid_place or labgrid_tags (not both)")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v) or v in (".", ".."):
            raise ValueError("use letters, digits, '.', '_' and '-' only")
        return v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith("-") or any(c.isspace() for c in v)):
            raise ValueError("a host name cannot start with '-' or contain spaces")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not ENV_KEY_RE.match(k):
                raise ValueError(f"bad environment variable name {k!r}")
        return v


def devices_file(path: str | os.PathLike | None = None) -> Path:
    return Path(path).expanduser() if path else default_devices_file()


def _describe(err: ValidationError, origin: str, name: str) -> BadInputError:
    errors = err.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a typo explains the rest
    where = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        hint = did_you_mean(str(first["loc"][-1]), [f for f in Device.model_fields if f != "name"])
        return BadInputError(f"{origin}: device '{name}': unknown key '{where}'", hint or "remove it")
    msg = str(first["msg"]).removeprefix("Value error, ")
    if not where:  # a rule over several keys (ssh needs a host; labgrid a coordinator and a place or tags)
        return BadInputError(f"{origin}: device '{name}': {msg}", "fix the entry")
    return BadInputError(f"{origin}: device '{name}': '{where}': {msg}", "fix the value")


def load_devices(path: str | os.PathLike | None = None) -> dict[str, Device]:
    f = devices_file(path)
    if not f.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(read_text_file(f, "device inventory"))
    except tomllib.TOMLDecodeError as err:
        raise BadInputError(f"{f}: not valid TOML: {err}", "fix the file or remove it") from err
    unknown = set(data) - {"devices"}
    if unknown:
        key = sorted(unknown)[0]
        raise BadInputError(f"{f}: unknown top-level key '{key}'", did_you_mean(key, ["devices"]) or "use [devices.NAME]")
    out = {}
    for name, entry in (data.get("devices") or {}).items():
        if not isinstance(entry, dict):
            raise BadInputError(f"{f}: devices.{name} must be a table")
        try:
            out[name] = Device.model_validate({**entry, "name": name})
        except ValidationError as err:
            raise _describe(err, str(f), name) from err
    return out


class UnknownDeviceError(BadInputError):
    """No device of that name: the one rule of every command that takes a device (remote-bench, devices
    check/remove, emulate stop, convert --verify-on): exit 3, one line, "did you mean" where it applies."""

    kind = "unknown_device"


def unknown_device(name: str, devices: dict[str, Device], where: str, *, add_hint: str | None = None,
                   example: str = "edgeopt remote-bench {} ARTIFACT") -> UnknownDeviceError:
    """The error for ``name`` missing among ``devices`` (``where``: the inventory file, or "no emulated
    device of that name"); ``example``: the command to suggest with the device's name in it."""
    hint = _same_profile_hint(name, devices, example) or did_you_mean(name, devices) or (
        f"known: {', '.join(devices)}" if devices else add_hint or "add one with 'edgeopt devices add NAME --host H --profile P'"
    )
    return UnknownDeviceError(f"unknown device '{name}' ({where})", hint)


def get_device(name: str, path: str | os.PathLike | None = None) -> Device:
    validate_name(name)
    devices = load_devices(path)
    if name not in devices:
        raise unknown_device(name, devices, f"in {devices_file(path)}")  # like an unknown profile
    return devices[name]


def _same_profile_hint(name: str, devices: dict[str, Device], example: str) -> str | None:
    """When ``name`` is a profile (``pi5``, or an alias/family of one) rather than a device: the devices
    of that profile, e.g. the running emulator ``pi5-emu``."""
    from edgeopt.errors import EdgeoptError
    from edgeopt.profiles import NameKind, profile_index

    try:
        choice = profile_index().get(name)
    except EdgeoptError:
        return None
    if choice is None:
        return None
    wanted = set(choice.members) if choice.via == NameKind.FAMILY else {choice.name}
    same = [d for d in devices.values() if d.profile in wanted]
    if not same:
        return None
    emulated = [d.name for d in same if d.emulated]
    real = [d.name for d in same if not d.emulated]
    parts = []
    if real:
        parts.append(f"the {name} board{'s are' if len(real) > 1 else ' is'} named {', '.join(real)}")
    if emulated:
        parts.append(f"the emulated {name} runs as {', '.join(emulated)} (timings emulated, not the board's speed)")
    first = (real or emulated)[0]
    return f"'{name}' is a profile, not a device: {'; '.join(parts)}: e.g. '{example.format(first)}'"


# --------------------------------------------------------------------------- writing


def _toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(v) -> str:
    if isinstance(v, Enum):
        return _toml_str(v.value)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _toml_str(v)
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps(devices: dict[str, Device]) -> str:
    lines = ["# edgeopt device inventory (edgeopt devices add|remove edits this file)", ""]
    for name in sorted(devices):
        d = devices[name].model_dump(exclude={"name"}, exclude_none=True)
        if d.get("transport") == TransportKind.SSH:
            del d["transport"]  # the default: older inventories stay as they were
        tables = {key: d.pop(key, {}) for key in ("env", "labgrid_tags")}
        lines.append(f"[devices.{_toml_str(name)}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in d.items()]
        for key, table in tables.items():
            if table:
                lines.append(f"[devices.{_toml_str(name)}.{key}]")
                lines += [f"{_toml_str(k)} = {_toml_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


def save_devices(devices: dict[str, Device], path: str | os.PathLike | None = None) -> Path:
    f = devices_file(path)
    write_text_atomic(f, dumps(devices))
    return f


def add_device(device: Device, path=None, *, replace: bool = False) -> Path:
    devices = load_devices(path)
    if device.name in devices and not replace:
        raise UsageError(f"device '{device.name}' already exists", "remove it first, or pick another name")
    devices[device.name] = device
    return save_devices(devices, path)


def make_device(**fields) -> Device:
    validate_name(fields.get("name", ""))
    try:
        return Device.model_validate(fields)
    except ValidationError as err:
        raise _describe(err, "device", fields.get("name", "?")) from err


def remove_device(name: str, path=None) -> Device:
    device = get_device(name, path)
    devices = load_devices(path)
    del devices[name]
    save_devices(devices, path)
    return device
