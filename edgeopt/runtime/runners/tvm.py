"""Runner for ``tvm`` artifacts (standard library + numpy + the TVM runtime only).

Loads ``model.so`` with ``tvm.runtime.load_module`` and runs its ``main`` in the Relax
``VirtualMachine`` (``tvm.runtime.vm``, which also works in a runtime-only TVM, ``TVM_USE_RUNTIME_LIB=1``); the weights are inside the library, so ``main`` takes the model's inputs in
ONNX order and returns one tensor or a tuple in ONNX output order.
"""

from __future__ import annotations

import os
import platform
import sys

import numpy as np

from . import base

_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
           "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}
_AFFINITY_BIG = 1  # tvm threading::ThreadGroup::kBig
_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}


def _runtime_only_if_no_compiler() -> None:
    """A device bundle ships TVM without ``libtvm_compiler.so``: load the runtime library alone then."""
    if "tvm" in sys.modules or "TVM_USE_RUNTIME_LIB" in os.environ:
        return
    import importlib.util

    spec = importlib.util.find_spec("tvm")
    if spec and spec.origin:
        lib = os.path.join(os.path.dirname(spec.origin), "lib")
        if os.path.isdir(lib) and not os.path.exists(os.path.join(lib, "libtvm_compiler.so")):
            os.environ["TVM_USE_RUNTIME_LIB"] = "1"


def machine_arch() -> str:
    m = platform.machine().lower()
    return _ARCH.get(m, m)


class Runner(base.Runner):
    def __init__(self, artifact_dir: str, manifest: dict, threads: int | None = None):
        super().__init__(artifact_dir, manifest, threads=threads)
        if self.threads:
            os.environ.setdefault("TVM_NUM_THREADS", str(int(self.threads)))
        # TVM's thread pool pins the *calling* thread to one core when it runs single-threaded,
        # and that affinity outlives the run: the caller's whole process (a benchmark harness, a
        # user's app) would then be stuck on core 0. Export TVM_BIND_THREADS=1 to pin anyway.
        os.environ.setdefault("TVM_BIND_THREADS", "0")
        _runtime_only_if_no_compiler()
        try:
            import tvm
            from tvm.runtime.vm import VirtualMachine  # not tvm.relax: that needs the compiler library
        except ImportError as err:
            raise base.RuntimeMissing("the TVM runtime is not installed (pip install 'edgeopt[tvm]')") from err
        settings = self.runtime.get("settings", {})
        kind = settings.get("device", "cpu")
        model = self.runtime["model"]
        twin = self.runtime.get("host_twin") or None
        self.device_library = settings.get("arch", machine_arch()) == machine_arch() and (
            kind == "cpu" or tvm.device(kind, 0).exist)
        if not self.device_library:
            if not twin or twin.get("arch") != machine_arch():
                raise base.RuntimeMissing(f"tvm: {model} is built for {settings.get('arch')}/{kind} and cannot run on "
                                          f"this {machine_arch()} machine (run it on the device or under emulation)")
            sys.stderr.write(f"edgeopt: tvm: running {twin['model']} (this machine's build of the same graph), "
                             f"not the device library {model}\n")
            model, kind = twin["model"], "cpu"
        self.library_file = model
        self.device = tvm.cpu(0) if kind == "cpu" else tvm.device(kind, 0)
        if self.threads:
            try:  # the thread pool may already exist (tvm imported earlier in this process)
                tvm.get_global_func("runtime.config_threadpool")(_AFFINITY_BIG, int(self.threads))
            except Exception:  # noqa: BLE001, S110 - older runtimes: TVM_NUM_THREADS above applies
                pass
        path = os.path.join(artifact_dir, model)
        self._tvm = tvm
        self.library = tvm.runtime.load_module(path)
        self.vm = VirtualMachine(self.library, self.device)
        self._main = self.vm["main"]
        self._io_in = self._io("inputs")
        self._io_out = self._io("outputs")
        self._dtypes = {t["name"]: _DTYPES.get(str(t.get("dtype")), None) for t in self.inputs}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = []
        for io in self._io_in:
            if io["name"] not in feeds:
                raise KeyError(f"missing input '{io['name']}' (inputs: {', '.join(i['name'] for i in self._io_in)})")
            arr = self.to_runtime_layout(np.asarray(feeds[io["name"]]), io)
            dt = self._dtypes.get(io["name"])
            arr = self.contiguous(arr.astype(dt, copy=False) if dt is not None else arr)
            args.append(self._tvm.runtime.tensor(arr, self.device))
        result = self._main(*args)
        tensors = [result] if hasattr(result, "numpy") else list(result)
        if len(tensors) != len(self._io_out):
            raise RuntimeError(f"tvm: library returned {len(tensors)} outputs, manifest lists {len(self._io_out)}")
        return {io["name"]: self.from_runtime_layout(t.numpy(), io) for io, t in zip(self._io_out, tensors, strict=True)}

    def close(self) -> None:
        self._main = None
        self.vm = None
        self.library = None
