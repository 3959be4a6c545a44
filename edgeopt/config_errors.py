"""The one-line error for a recipe, a stage override or the chain options that fail validation: the key at fault,
with "did you mean" among the keys its config knows."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from edgeopt.errors import BadInputError, did_you_mean


def _nested_fields(model: type[BaseModel], path) -> list[str]:
    """The field names of the sub-config at ``path`` inside ``model`` (``bound`` -> AccuracyBound's)."""
    for part in path:
        info = model.model_fields.get(str(part))
        subs = [a for a in (info.annotation, *getattr(info.annotation, "__args__", ())) if info is not None
                and isinstance(a, type) and issubclass(a, BaseModel)]
        if not subs:
            return []
        model = subs[0]
    return list(model.model_fields)


def validation_message(err: ValidationError, origin: str, fields: list[str] | type[BaseModel]) -> BadInputError:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    if not isinstance(fields, list):
        fields = _nested_fields(fields, first["loc"][:-1])
    if first["type"] == "extra_forbidden":
        key = str(first["loc"][-1])
        return BadInputError(f"{origin}: unknown key '{loc}'", did_you_mean(key, fields) or f"known keys: {', '.join(fields)}")
    return BadInputError(f"{origin}: '{loc}': {first['msg']}", "fix the value")
