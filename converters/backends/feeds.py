"""The feeds a backend's own profiler gives its runtime: each input in the runtime's name and layout, as the
artifact's runner feeds it (the manifest's ``runtime.io.inputs``)."""

from __future__ import annotations


def runtime_feeds(manifest: dict, feeds: dict) -> dict:
    from edgeopt.runtime.runners.base import Runner

    io = {x["name"]: x for x in (manifest["runtime"].get("io") or {}).get("inputs") or []}
    out = {}
    for name, arr in feeds.items():
        spec = io.get(name, {"runtime_name": name, "transpose": None})
        out[spec.get("runtime_name", name)] = Runner.to_runtime_layout(arr, spec)
    return out
