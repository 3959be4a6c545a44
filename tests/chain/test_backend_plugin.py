"""Adding a backend is its converter, its runner and one registry call: a backend defined here, outside
edgeopt (ONNX's own reference evaluator as the runtime), goes through convert -> bench -> results list with
no other file edited, and every table keyed by backend (versions, determinism, per-layer, doctor) copes."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from edgeopt.converters.base import Backend, ChainContext, ChainOptions, Format, Intermediate, StageConfig
from edgeopt.enums import Precision
from edgeopt.runtime.runners.base import Runner as BaseRunner

NAME = "numpy-ref"


class NumpyRefConfig(StageConfig):
    pass


class NumpyRefBackend(Backend):
    """The artifact is the ONNX model itself; its runner is onnx.reference (pure NumPy)."""

    name = NAME
    Config = NumpyRefConfig
    accepts = (Format.ONNX,)
    produces = Format.ONNX
    precisions = (Precision.FP32,)
    requires = ("onnx",)
    libraries = (("onnx", "onnx"),)
    deterministic = (True, "the model file is copied byte for byte")

    @classmethod
    def configure(cls, options: ChainOptions) -> NumpyRefConfig:
        return NumpyRefConfig()

    def run(self, model: Intermediate, config: NumpyRefConfig, ctx: ChainContext) -> Intermediate:
        from edgeopt.model import graph_inputs, graph_outputs, load_onnx

        target = ctx.artifact_dir / "model.onnx"
        shutil.copyfile(model.path, target)
        proto = load_onnx(target, check=False)
        runtime = {"backend": NAME, "runner": __name__, "model": target.name, "settings": {},
                   "io": {kind: [{"name": t.name, "runtime_name": t.name, "transpose": None} for t in specs]
                          for kind, specs in (("inputs", graph_inputs(proto)), ("outputs", graph_outputs(proto)))}}
        return Intermediate(target, Format.ONNX, model.precision, {**model.notes, "runtime": runtime})


BACKEND = NumpyRefBackend


class Runner(BaseRunner):
    def __init__(self, artifact_dir, manifest, threads=None):
        super().__init__(artifact_dir, manifest, threads)
        import os

        from onnx.reference import ReferenceEvaluator

        self.session = ReferenceEvaluator(os.path.join(artifact_dir, self.runtime["model"]))
        self.names = [io["name"] for io in self._io("outputs")]

    def run(self, feeds):
        outs = self.session.run(None, {k: np.asarray(v) for k, v in feeds.items()})
        return dict(zip(self.names, outs, strict=True))


@pytest.fixture
def numpy_ref_backend():
    from edgeopt.converters.registry import register_backend, unregister_backend

    NumpyRefBackend.backend = register_backend(NAME, __name__)
    try:
        yield NumpyRefBackend.backend
    finally:
        unregister_backend(NAME)


def test_a_backend_registered_from_tests_converts_benches_and_is_stored(numpy_ref_backend, repo, tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts
    from edgeopt.convert import convert
    from edgeopt.converters.registry import libraries
    from edgeopt.doctor import runtime_libraries
    from edgeopt.results import list_runs

    db = tmp_path / "results.db"
    out = tmp_path / "art"
    res = convert(str(repo / "fixtures/models/digits_cnn.onnx"), "host", str(out), backend=NAME, precision="fp32")
    manifest = res.manifest
    assert manifest.backend == NAME and manifest.runtime.runner == __name__
    assert manifest.validation.cosine_min > 0.9999  # its runner's outputs are ONNX Runtime's FP32 ones
    assert manifest.versions["onnx"]  # its libraries' versions come from its class
    bench = bench_artifacts([str(out)], BenchOptions(min_runs=5, min_seconds=0.1, db=str(db)))
    row = bench["rows"][0]
    assert row["backend"] == NAME and row["latency_ms"]["p50"] > 0
    runs = list_runs(db)
    assert [(r["backend"], r["id"]) for r in runs] == [(NAME, row["run_id"])]
    assert ("onnx", "onnx", None) in libraries() and ("onnx", "onnx", None) in runtime_libraries()


def test_an_unregistered_backend_name_is_refused(numpy_ref_backend):
    from edgeopt.converters.registry import parse_backend, unregister_backend
    from edgeopt.errors import UsageError

    assert parse_backend(NAME) is numpy_ref_backend
    unregister_backend(NAME)
    with pytest.raises(UsageError, match="unknown backend 'numpy-ref'"):
        parse_backend(NAME)
