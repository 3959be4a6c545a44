"""Runners: load an artifact with its runtime and run it on numpy arrays.

``open_runner(artifact_dir)`` reads ``manifest.json``'s ``runtime`` entry and
returns the right :class:`~.base.Runner`. Callers always feed and receive arrays
named and laid out as in the original ONNX model; a runner hides layout changes.
"""

from __future__ import annotations

import importlib
import json
import os


def read_manifest(artifact_dir: str) -> dict:
    with open(os.path.join(artifact_dir, "manifest.json")) as f:
        return json.load(f)


def open_runner(artifact_dir: str, threads: int | None = None, manifest: dict | None = None):
    manifest = manifest or read_manifest(artifact_dir)
    if manifest["runtime"].get("cascade"):  # an early-exit artifact: one model per stage (runtime/cascade.py)
        from ..cascade import CascadeRunner

        return CascadeRunner(artifact_dir, manifest, threads=threads, open_runner=open_runner)
    backend = manifest["runtime"]["backend"]
    runner = manifest["runtime"].get("runner")
    if runner:  # a backend registered from outside edgeopt names its runner's module
        module = importlib.import_module(runner)
    else:  # a built-in backend's runner is the module of its name here (shipped to devices: no registry)
        if not isinstance(backend, str) or not backend.isidentifier() or backend == "base":
            raise ValueError(f"the manifest names no known runtime backend ({backend!r})")
        module = importlib.import_module(f".{backend}", __name__)
    return module.Runner(artifact_dir, manifest, threads=threads)
