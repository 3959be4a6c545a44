"""One-line errors for a profile that does not validate: the most useful problem first, "did you mean"
for a misspelt key at any depth, and ``sources`` keys that name no number of the profile."""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from edgeopt.errors import BadProfileError, did_you_mean

from .model import DeviceProfile


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
