"""The one registry of chain stages and backends.

A stage module registers itself with :func:`register_stage`; backends are
listed here by name and module so that importing the registry imports nothing
heavy. Adding a backend is adding one module (a ``Backend`` subclass, its descriptor in class attributes),
its runner (``edgeopt/runtime/runners/<name>.py``) and one line in ``BACKEND_MODULES``; the tables keyed by
backend (extras, library versions, device runtimes, determinism, pre-flight checks, per-layer profilers)
are read from the classes here, and the rest of what the core asks of a backend from its hooks (``converters/hooks.py``).
"""

from __future__ import annotations

import importlib

from edgeopt.enums import BackendName
from edgeopt.errors import UsageError, did_you_mean

_STAGE_MODULES = {
    "normalize": "edgeopt.converters.normalize",
    "prune": "edgeopt.converters.prune",
    "recover": "edgeopt.converters.recover",
    "qdq": "edgeopt.converters.quantize.qdq_stage",
    "early_exit": "edgeopt.converters.early_exit.stage",
}
# A stage's old name -> its name now, with what the stage is: a recipe's ``stages:``, ``--set OLD.FIELD=V`` and
# ``ChainOptions.stages`` are read under the new name, with a warning (:func:`canonical_stage_overrides`, called
# where the user's stage names are checked). A manifest or plan written earlier keeps the name it ran under.
STAGE_ALIASES = {"quantize": "qdq"}
_RENAMED_WHAT = {"qdq": "the ONNX Q/DQ stage"}
BACKEND_MODULES = {
    BackendName.ONNXRUNTIME: "edgeopt.converters.backends.onnxruntime",
    BackendName.OPENVINO: "edgeopt.converters.backends.openvino",
    BackendName.TFLITE: "edgeopt.converters.backends.tflite",
    BackendName.TVM: "edgeopt.converters.backends.tvm",
}
# the backend whose FP32 run on the CPU is the reference: every stage check, calibration, probe, quick timing and
# printed speed-up is measured against it (edgeopt/runtime/reference.py opens it through its runner)
REFERENCE = BackendName.ONNXRUNTIME
_registered: dict[str, type] = {}


def register_stage(cls):
    """Class decorator: ``@register_stage`` on a Stage or Backend subclass."""
    _registered[cls.name] = cls
    return cls


def stage_names() -> list[str]:
    return list(_STAGE_MODULES)


def backend_names() -> list[BackendName]:
    return list(BACKEND_MODULES)


def get_stage(name: str):
    if name not in _STAGE_MODULES:
        hint = (f"it is now called '{STAGE_ALIASES[name]}'" if name in STAGE_ALIASES
                else did_you_mean(name, _STAGE_MODULES) or f"stages: {', '.join(_STAGE_MODULES)}")
        raise UsageError(f"unknown stage '{name}'", hint)
    importlib.import_module(_STAGE_MODULES[name])
    return _registered[name]


def stage_alias_warning(old: str) -> str:
    new = STAGE_ALIASES[old]
    return f"stage '{old}' is now called '{new}' ({_RENAMED_WHAT[new]}); read as '{new}'"


def canonical_stage_overrides(stages: dict, warn) -> dict:
    """Per-stage overrides (a recipe's ``stages:`` with ``--set``'s over it) with each old stage name
    (:data:`STAGE_ALIASES`) read as the stage's name now, ``warn`` told once per old name; the same field given
    under both names is a usage error (which one would win is not the user's intent to guess)."""
    out: dict = {}
    for name, override in stages.items():
        new = STAGE_ALIASES.get(name, name)
        if new != name:
            warn(stage_alias_warning(name))
        if new in out:  # both names given: the old one is whichever isn't ``new``
            old = name if name != new else next(o for o in stages if STAGE_ALIASES.get(o) == new)
            out[new] = _merge_alias(out[new], override or {}, old, new, ())
        else:
            out[new] = override
    return out


def _merge_alias(a: dict, b: dict, old: str, new: str, path: tuple[str, ...]) -> dict:
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _merge_alias(out[key], value, old, new, (*path, key))
        else:
            field = ".".join((*path, key))
            raise UsageError(f"both {old}.{field} and {new}.{field} given ('{old}' is the old name of stage '{new}')",
                             f"give it once, as {new}.{field}")
    return out


def parse_backend(name: str) -> BackendName:
    try:
        return BackendName(name)
    except ValueError as err:
        names = [b.value for b in BackendName]
        raise UsageError(f"unknown backend '{name}'", did_you_mean(name, names) or f"backends: {', '.join(names)}") from err


def register_backend(name: str, module: str) -> BackendName:
    """Add a backend defined outside edgeopt: ``module`` exports ``BACKEND`` (a ``Backend`` subclass whose
    descriptor is its class attributes) and, unless its runtime entry names another ``runner`` module, the
    ``Runner``. Returns its (new) ``BackendName``; the plan, bench and results then treat it like a built-in."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"invalid backend name {name!r}", "use letters, digits, '-' and '_'")
    b = BackendName.register(name)
    BACKEND_MODULES[b] = module
    return b


def unregister_backend(name: str) -> None:
    """Undo :func:`register_backend` (a built-in backend can't be removed)."""
    if name in BACKEND_MODULES and name not in {b.value for b in BackendName}:  # not a built-in
        BACKEND_MODULES.pop(BackendName(name), None)
        BackendName.unregister(name)


def get_backend(name: BackendName | str):
    b = parse_backend(name) if isinstance(name, str) else name
    module = importlib.import_module(BACKEND_MODULES[b])
    return module.BACKEND


def backend_classes() -> dict[BackendName, type]:
    """Every registered backend's class (its module imports no heavy library)."""
    return {b: get_backend(b) for b in BACKEND_MODULES}


def backend_hooks() -> dict[BackendName, object]:
    """Every registered backend's :class:`edgeopt.converters.hooks.BackendHooks` (imported, nothing heavy)."""
    from edgeopt.converters.hooks import BackendHooks

    return {b: resolve(cls.hooks) if cls.hooks else BackendHooks() for b, cls in backend_classes().items()}


def hooks_of(name: BackendName | str):
    """One backend's hooks (see :func:`backend_hooks`)."""
    from edgeopt.converters.hooks import BackendHooks

    cls = get_backend(name)
    return resolve(cls.hooks) if cls.hooks else BackendHooks()


def model_file_backend(path) -> BackendName | None:
    """The backend whose own model files have ``path``'s suffix (its hooks' ``model_file_suffixes``), or None."""
    from pathlib import Path

    suffix = Path(path).suffix.lower()
    return next((b for b, h in backend_hooks().items() if suffix in h.model_file_suffixes), None)


# Libraries the chain uses whatever the backend (import name, distribution, extra).
CORE_LIBRARIES = (("numpy", "numpy", None), ("onnx", "onnx", None), ("onnxruntime", "onnxruntime", None),
                  ("onnxslim", "onnxslim", None))


def libraries() -> list[tuple[str, str, str | None]]:
    """(import name, distribution, extra) of the core libraries and every backend's, each once."""
    out, seen = [], set()
    for lib in [*CORE_LIBRARIES, *((i, d, cls.extra) for cls in backend_classes().values() for i, d in cls.libraries),
                *(lib for cls in backend_classes().values() for lib in cls.other_libraries)]:
        if lib[1] not in seen:
            seen.add(lib[1])
            out.append(lib)
    return out


def distributions() -> tuple[str, ...]:
    """The distributions of :func:`libraries`: what a measurement on this host reports the versions of."""
    return tuple(d for _, d, _ in libraries())


def resolve(ref: str):
    """The object a ``"module:attribute"`` reference names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
