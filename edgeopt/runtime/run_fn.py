"""The one factory of run functions: a callable taking feeds by input name and returning outputs by output name
(numpy arrays), for the stage checks, the INT8 searches, the validation and the quick timings.

``run_fn(model)`` runs an ONNX file (or an in-memory ``onnx.ModelProto``) in the reference runtime
(``reference.session``): the FP32 reference everything is compared with. ``run_fn(artifact_dir)`` runs an artifact through its
runner, the code that runs it on the device (``runners.open_runner``). ``runtime``: the manifest's runtime entry of
an artifact not written yet, its files in ``model`` (a directory) or ``model`` itself (a file, put in a folder of
its own as the runner reads it). Standard library + numpy here; each runtime is imported when used.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

_TENSOR_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(float16)": np.float16, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
              "tensor(double)": np.float64, "tensor(bool)": np.bool_}


def run_fn(model, threads: int | None = None, *, runtime: dict | None = None, spinning: bool = True):
    """A run function over ``model`` (see the module's docstring). ``threads``: the runtime's intra-op threads
    (None: its default). ``spinning=False`` (the reference runtime): the pool threads sleep after a call instead of spinning
    (``session.intra_op.allow_spinning`` 0), as any speed check alternating ONNX Runtime with another runtime needs.
    Feeds that are not inputs of the model are ignored."""
    path = None if hasattr(model, "SerializeToString") else os.fspath(model)
    if runtime is None and (path is None or not os.path.isdir(path)):
        return _onnx_run(model if path is None else path, threads, spinning)
    from .runners import open_runner

    if runtime is not None and not os.path.isdir(path):  # a model file outside an artifact: a folder of its own
        folder = os.path.join(os.path.dirname(path), os.path.splitext(os.path.basename(path))[0] + ".dir")
        os.makedirs(folder, exist_ok=True)
        shutil.copyfile(path, os.path.join(folder, runtime["model"]))
        path = folder
    manifest = {"runtime": runtime, "inputs": [], "outputs": []} if runtime is not None else None
    runner = open_runner(path, threads=threads, manifest=manifest)

    def run(feed):
        return runner.run({k: np.asarray(v) for k, v in feed.items()})

    run.runner = runner
    return run


def _onnx_run(model, threads: int | None, spinning: bool):
    from .reference import session

    sess = session(model, threads=threads, spinning=spinning)
    names = [o.name for o in sess.get_outputs()]
    in_types = {i.name: _TENSOR_TYPES.get(i.type) for i in sess.get_inputs()}

    def run(feed):
        cast = {k: np.asarray(v, dtype=in_types[k]) for k, v in feed.items() if k in in_types}
        return dict(zip(names, sess.run(names, cast), strict=True))

    run.session = sess
    return run
