"""Finding and reading profiles: built-ins (``edgeopt.device_profiles``), ``--profile-dir`` and
``EDGEOPT_PROFILE_PATH`` directories (user directories win), files by path, and ``host`` (detected from
this machine by ``edgeopt.host``, parsed here). YAML with a duplicate key is an error."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from edgeopt.errors import BadProfileError

from .model import DeviceProfile
from .validation import check_source_keys, describe_validation_error

PROFILE_PATH_ENV = "EDGEOPT_PROFILE_PATH"


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


def search_dirs(profile_dirs: list[str | os.PathLike] | None) -> list[Path]:
    """``--profile-dir`` directories (which must exist), then ``EDGEOPT_PROFILE_PATH`` ones."""
    dirs = []
    for d in profile_dirs or []:
        if not Path(d).is_dir():
            raise BadProfileError(f"profile directory '{d}' not found", "check --profile-dir")
        dirs.append(Path(d))
    env = os.environ.get(PROFILE_PATH_ENV, "")
    dirs += [Path(d) for d in env.split(os.pathsep) if d]
    return dirs


def builtin_files() -> dict[str, Any]:
    root = resources.files("edgeopt.device_profiles")
    return {f.name[:-5]: f for f in root.iterdir() if f.name.endswith(".yaml")}


def available_profiles(profile_dirs: list[str | os.PathLike] | None = None) -> dict[str, str]:
    """name -> origin ("builtin", "detected" or a file path); user directories win over built-ins."""
    out = {name: "builtin" for name in builtin_files()}
    out["host"] = "detected"
    for d in reversed(search_dirs(profile_dirs)):
        if d.is_dir():
            for f in sorted(d.glob("*.yaml")):
                out[f.stem] = str(f)
    return dict(sorted(out.items()))


def load_exact(name_or_path: str, profile_dirs) -> DeviceProfile | None:
    """The profile named exactly ``name_or_path`` (or the file at that path); None when there is none."""
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return load_profile_file(name_or_path)
    for d in search_dirs(profile_dirs):
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
    builtin = builtin_files()
    if name_or_path in builtin:
        origin = f"device_profiles/{name_or_path}.yaml"
        return parse_profile(read_yaml(builtin[name_or_path].read_text(encoding="utf-8"), origin), origin)
    return None
