"""Runner for ``onnxruntime`` artifacts (standard library + numpy + onnxruntime only)."""

from __future__ import annotations

import os

import numpy as np

from . import base

_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
          "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


class Runner(base.Runner):
    def __init__(self, artifact_dir: str, manifest: dict, threads: int | None = None):
        super().__init__(artifact_dir, manifest, threads=threads)
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise base.RuntimeMissing("onnxruntime is not installed (pip install onnxruntime)") from err
        settings = self.runtime.get("settings", {})
        so = ort.SessionOptions()
        so.log_severity_level = 3
        level = settings.get("graph_optimization_level", "ORT_ENABLE_ALL")
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        if self.threads:
            so.intra_op_num_threads = int(self.threads)
        wanted = settings.get("provider") or "CPUExecutionProvider"
        available = ort.get_available_providers()
        self.provider = wanted if wanted in available else "CPUExecutionProvider"
        providers = [self.provider] + (["CPUExecutionProvider"] if self.provider != "CPUExecutionProvider" else [])
        path = os.path.join(artifact_dir, self.runtime["model"])
        self.session = ort.InferenceSession(path, so, providers=providers)
        self._in = {i.name: _TYPES.get(i.type) for i in self.session.get_inputs()}
        self._out = [o.name for o in self.session.get_outputs()]
        self._io_in = {io["name"]: io for io in self._io("inputs")}
        self._io_out = self._io("outputs")

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ort_feeds = {}
        for name, arr in feeds.items():
            io = self._io_in.get(name, {"runtime_name": name, "transpose": None})
            rt = io["runtime_name"]
            dt = self._in.get(rt)
            arr = self.to_runtime_layout(np.asarray(arr), io)
            ort_feeds[rt] = arr.astype(dt, copy=False) if dt is not None else arr
        results = dict(zip(self._out, self.session.run(self._out, ort_feeds), strict=True))
        return {io["name"]: self.from_runtime_layout(results[io["runtime_name"]], io) for io in self._io_out}

    def close(self) -> None:
        self.session = None
