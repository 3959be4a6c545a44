"""The Runner contract (standard library + numpy only)."""

from __future__ import annotations

import numpy as np


class RuntimeMissing(ImportError):
    """The backend's runtime is not installed where the runner runs."""


class Runner:
    """Runs one artifact. ``run`` takes and returns arrays named and laid out as in the ONNX model.

    The manifest's ``runtime`` entry holds: ``backend``, ``model`` (file name),
    ``settings`` (backend-specific), and ``io`` (``inputs``/``outputs``: lists of
    ``{"name", "runtime_name", "shape", "dtype", "transpose"}`` where ``transpose``
    maps the ONNX layout to the runtime's, e.g. ``[0, 2, 3, 1]`` for NCHW->NHWC).
    """

    def __init__(self, artifact_dir: str, manifest: dict, threads: int | None = None):
        self.artifact_dir = artifact_dir
        self.manifest = manifest
        self.runtime = manifest["runtime"]
        self.threads = threads or self.runtime.get("settings", {}).get("threads")
        self.inputs = manifest["inputs"]
        self.outputs = manifest["outputs"]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # helpers for subclasses ------------------------------------------------
    def _io(self, kind: str) -> list[dict]:
        return self.runtime.get("io", {}).get(kind) or [
            {"name": t["name"], "runtime_name": t["name"], "transpose": None} for t in self.manifest[kind]
        ]

    @staticmethod
    def contiguous(array: np.ndarray) -> np.ndarray:
        """``array`` C-contiguous with its shape kept: ``np.ascontiguousarray`` turns a scalar (a 0-d input
        such as Silero VAD's sample rate) into shape (1,), which OpenVINO refuses for a [] input."""
        return array if array.flags.c_contiguous else np.ascontiguousarray(array)

    @staticmethod
    def to_runtime_layout(array: np.ndarray, io: dict) -> np.ndarray:
        perm = io.get("transpose")
        return np.ascontiguousarray(np.transpose(array, perm)) if perm else array

    @staticmethod
    def from_runtime_layout(array: np.ndarray, io: dict) -> np.ndarray:
        perm = io.get("transpose")
        return np.transpose(array, np.argsort(perm)) if perm else array
