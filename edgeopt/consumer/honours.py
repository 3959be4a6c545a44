"""Per setting of an artifact: whether the runtime's plain API applies it from the model file alone, and how a
consumer applies it (what ``load.py``/``load.cc`` do); each backend states its own (its hooks'
``plain_api_settings``)."""

from __future__ import annotations


def hooks_for(backend: str | None):
    """The backend's hooks (``edgeopt.converters.hooks.BackendHooks``); the defaults for a name not registered."""
    from edgeopt.converters.hooks import BackendHooks
    from edgeopt.converters.registry import hooks_of
    from edgeopt.errors import EdgeoptError

    try:
        return hooks_of(backend)
    except (EdgeoptError, KeyError):
        return BackendHooks()


def carried_settings(backend: str, settings: dict) -> list[dict]:
    """Each setting of the manifest with its value, whether the plain API honours it from the file alone, and
    how ``load.py``/``load.cc`` apply it (a setting not known here: not honoured, applied as the runner does)."""
    table = hooks_for(backend).plain_api_settings()
    out = []
    for name, value in settings.items():
        honours, how = table.get(name, (False, "applied by load.py as edgeopt's runner applies it"))
        out.append({"name": name, "value": value, "plain_api_honours": honours, "how": how})
    return out
