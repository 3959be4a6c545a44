"""Runner for ``onnxruntime`` artifacts (standard library + numpy + onnxruntime only).

The session gets the artifact's provider, then its fallbacks, then the CPU, each only where this ONNX Runtime has
it, with the artifact's options for its provider (TensorRT: the engine cache under the device's work dir, so the
engine built at the first session creation on the board is loaded by later runs). Where the artifact's provider did
not run (no GPU build here, or its libraries failed to load), the runner says which provider did (``execution``,
and one stderr line per process); where TensorRT ran, whether this session built the engine (the first run on the
board: said on stderr) or loaded it from the cache (``execution["engine"]``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from . import base

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
CUDA_QDQ = "as float with Q/DQ kernels"  # what CUDA does with an explicit-Q/DQ model (no INT8 layer fusion)
WORK_DIR_ENV = "EDGEOPT_WORK_DIR"  # the device's work dir; remote-bench sets it for artifacts that name {work_dir}
DEFAULT_WORK_DIR = "~/.cache/edgeopt-remote"  # a device's default work dir (remote/inventory.py, the profiles)
_said: set[tuple[str, str]] = set()

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
        so = session_options(ort, settings, self.threads)
        wanted = settings.get("provider") or CPU
        available = ort.get_available_providers()
        providers = session_providers(settings, available)
        path = os.path.join(artifact_dir, self.runtime["model"])
        cache = _engine_cache(providers)
        before, t0 = _files(cache), time.perf_counter()
        self.session = open_session(ort, path, so, providers, settings)
        self.execution = execution_report(wanted, providers, self.session.get_providers(), available)
        self.provider = self.execution["provider"]
        if manifest.get("precision") == "int8" and self.provider == CUDA:
            self.execution["runs_as"] = CUDA_QDQ
            say_once((CUDA, "qdq"), f"{CUDA} runs this INT8 Q/DQ model {CUDA_QDQ}: only TensorRT fuses Q/DQ into "
                                    "INT8 layers")
        if self.execution.get("why"):
            say_once((wanted, self.provider), f"onnxruntime ran on {self.provider}, not the artifact's {wanted}: "
                                              f"{self.execution['why']}")
        if cache and self.execution.get("engine_cache"):
            self.execution["engine"] = engine_fact(cache, before, _files(cache), time.perf_counter() - t0)
        self._in = {i.name: _TYPES.get(i.type) for i in self.session.get_inputs()}
        self._out = [o.name for o in self.session.get_outputs()]
        self._io_in = {io["name"]: io for io in self._io("inputs")}
        self._io_out = self._io("outputs")
        # no renamed or transposed input or output, outputs in the session's order: run() skips the mapping (its
        # Python costs 1-3 us a call, 5 % of a 20 us model such as the digits CNN)
        self._plain = all(io["transpose"] is None and io["runtime_name"] == io["name"]
                          for io in [*self._io_in.values(), *self._io_out]) and \
            [io["name"] for io in self._io_out] == self._out

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._plain:
            return dict(zip(self._out, self.session.run(self._out, self._cast(feeds)), strict=True))
        ort_feeds = {}
        for name, arr in feeds.items():
            io = self._io_in.get(name, {"runtime_name": name, "transpose": None})
            rt = io["runtime_name"]
            dt = self._in.get(rt)
            arr = self.to_runtime_layout(np.asarray(arr), io)
            ort_feeds[rt] = arr.astype(dt, copy=False) if dt is not None else arr
        results = dict(zip(self._out, self.session.run(self._out, ort_feeds), strict=True))
        return {io["name"]: self.from_runtime_layout(results[io["runtime_name"]], io) for io in self._io_out}

    def _cast(self, feeds: dict) -> dict:
        """``feeds`` with each array in its input's dtype (no copy where it already is)."""
        out = {}
        for name, arr in feeds.items():
            dt = self._in.get(name)
            if type(arr) is not np.ndarray or (dt is not None and arr.dtype != dt):
                arr = np.asarray(arr) if dt is None else np.asarray(arr).astype(dt, copy=False)
            out[name] = arr
        return out

    def close(self) -> None:
        self.session = None


def session_options(ort, settings: dict, threads: int | None = None):
    """The ``SessionOptions`` the artifact's settings ask for: graph optimization level (ALL unless set), threads,
    and the pool threads' spinning."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    level = settings.get("graph_optimization_level", "ORT_ENABLE_ALL")
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if threads:
        so.intra_op_num_threads = int(threads)
    if settings.get("allow_spinning") is False:  # pool threads sleep after a call (a timing beside other runtimes)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


REFERENCE_PROVIDER = CPU  # where the reference run (runtime/reference.py) happens


def reference_session(model, *, threads: int | None = None, spinning: bool = True, optimize: bool = True,
                      log_level: int = 3):
    """The reference session over ``model`` (a path, serialized bytes or an ``onnx.ModelProto``): the CPU
    provider, no provider options (see ``runtime/reference.py``). ``spinning=False``: the pool threads sleep after
    a call; ``optimize=False``: no graph optimization, every tensor as written."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    if threads:
        so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if hasattr(model, "SerializeToString"):
        src = model.SerializeToString()
    elif isinstance(model, bytes):
        src = model
    else:
        src = os.fspath(model)
    return ort.InferenceSession(src, so, providers=[REFERENCE_PROVIDER])


def is_run_error(err: BaseException) -> bool:
    """Whether ``err`` came from ONNX Runtime's C++ core running a model (its ``capi`` exceptions)."""
    return type(err).__module__.startswith("onnxruntime.capi")


def session_kwargs(settings: dict, providers: list | None = None) -> dict:
    """``InferenceSession``'s keyword arguments from the settings: ``disabled_optimizers`` (ONNX Runtime's own graph
    optimizers left off, e.g. ``WeightBiasQuantization``, which turns a float bias into an int32 DequantizeLinear
    that TensorRT's parser rejects and CUDA has no kernel for). Given the session's ``providers``, they apply only
    where one of them is not the CPU: on the CPU alone those DQs fuse into QLinearConv (a Q/DQ detector at 320x320
    ran 3.6x slower on the CPU with the optimizer off)."""
    disabled = list(settings.get("disabled_optimizers") or ())
    if providers is not None and all((p[0] if isinstance(p, tuple) else p) == CPU for p in providers):
        return {}
    return {"disabled_optimizers": disabled} if disabled else {}


def _name(provider) -> str:
    return provider[0] if isinstance(provider, tuple) else provider


def open_session(ort, path: str, so, providers: list, settings: dict):
    """The ``InferenceSession`` of ``path`` on ``providers`` with the settings' keyword arguments. ONNX Runtime's
    own fallback, when a provider fails to load (TensorRT without its libraries), re-creates the session on its
    fallback providers *without* ``disabled_optimizers``: where that happened, the session is made again on the
    providers that did load, with them, so the graph that runs is the one that was checked."""
    kwargs = session_kwargs(settings, providers)
    with stdout_to_stderr():  # a provider that fails to load prints on fd 1: keep stdout for the caller's JSON
        session = ort.InferenceSession(path, so, providers=providers, **kwargs)
        used = session.get_providers()
        if kwargs and used and used[0] != _name(providers[0]):
            loaded = [p for p in providers if _name(p) in used]
            session = ort.InferenceSession(path, so, providers=loaded, **session_kwargs(settings, loaded))
    return session


@contextlib.contextmanager
def stdout_to_stderr():
    """File descriptor 1 pointed at fd 2 for the block, and Python's ``sys.stdout`` at ``sys.stderr``: what C++ code
    prints (an execution provider's load errors) and ONNX Runtime's Python "EP Error … Falling back" lines go to
    stderr; both restored after. A command's JSON on stdout stays the only thing there."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 to save (a closed stdout): nothing to redirect
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        os.dup2(_stderr_fd(), 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _stderr_fd() -> int:
    """The descriptor behind ``sys.stderr`` (the CLI keeps the real stderr there and points fd 2 at /dev/null),
    else 2."""
    try:
        sys.stderr.flush()
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def work_dir() -> str:
    """The device's work dir: ``EDGEOPT_WORK_DIR`` (remote-bench), else a device's default."""
    return os.path.expanduser(os.environ.get(WORK_DIR_ENV) or DEFAULT_WORK_DIR)


def provider_options(options: dict) -> dict:
    """The artifact's options for its provider, ``{work_dir}`` filled in (the cache directory made)."""
    out = {}
    for key, value in (options or {}).items():
        if isinstance(value, str) and "{work_dir}" in value:
            value = value.replace("{work_dir}", work_dir())
            if key.endswith("cache_path"):
                os.makedirs(value, exist_ok=True)
        out[key] = value
    return out


def session_providers(settings: dict, available: list[str]) -> list:
    """What the session is given: the artifact's provider (with its options) and its fallbacks where this ONNX
    Runtime has them, the CPU last."""
    wanted = settings.get("provider") or CPU
    chain = [wanted, *(settings.get("fallback_providers") or ()), CPU]
    out: list = []
    for name in dict.fromkeys(chain):
        if name not in available and name != CPU:
            continue
        options = settings.get("provider_options") if name == wanted and name != CPU else None
        out.append((name, provider_options(options)) if options else name)
    return out


def execution_report(wanted: str, given: list, used: list[str], available: list[str]) -> dict:
    """Which provider ran (the session's first), and why it is not the artifact's when it is not."""
    ran = used[0] if used else CPU
    report = {"target_provider": wanted, "provider": ran, "session_providers": list(used)}
    options = next((p[1] for p in given if isinstance(p, tuple) and p[0] == ran), {})
    if options.get("trt_engine_cache_enable") and options.get("trt_engine_cache_path"):
        report["engine_cache"] = options["trt_engine_cache_path"]
    if ran != wanted:
        report["why"] = (f"{wanted} is not in this ONNX Runtime (it has {', '.join(available)})"
                         if wanted not in available else f"{wanted} did not load in this ONNX Runtime (its libraries?)")
    return report


def _engine_cache(providers: list) -> str | None:
    options = next((p[1] for p in providers if isinstance(p, tuple)), {})
    return options.get("trt_engine_cache_path") if options.get("trt_engine_cache_enable") else None


def _files(folder: str | None) -> set[str]:
    return set(os.listdir(folder)) if folder and os.path.isdir(folder) else set()


def engine_fact(cache: str, before: set[str], after: set[str], seconds: float) -> dict:
    """Whether this session built the TensorRT engine (new files in the cache: the first run on this board) or
    loaded it from the cache (a later run), and how long the session took to create."""
    built = sorted(after - before)
    fact = {"cache": cache, "session_seconds": round(seconds, 3),
            "built_now": bool(built), "files": built or sorted(after)}
    if built:
        say_once(("engine", cache), f"built the TensorRT engine on this board in {seconds:.1f} s (session "
                                    f"creation); kept in {cache} for the next run")
    return fact


def say_once(key: tuple[str, str], line: str) -> None:
    """One stderr line per process and ``key`` (e.g. the artifact's provider and the one that ran)."""
    if key in _said:
        return
    _said.add(key)
    print(f"edgeopt runtime: {line}", file=sys.stderr)
