"""Backend ``tflite``: ONNX -> TFLite (LiteRT) FP32 / FP16 / full-integer INT8 with onnx2tf.

The conversion runs onnx2tf in a subprocess (:mod:`.tflite_convert`; TensorFlow never enters this
process), on a copy of the model, with its output streamed to ``onnx2tf.log`` in the artifact.
INT8 is onnx2tf's full-integer quantization calibrated on the user's data (``ctx.calib``, written NHWC
as onnx2tf's ``-cind`` expects, mean 0 / std 1 so the data passes unchanged); ``io_dtype`` picks float32
or int8 model inputs/outputs. onnx2tf turns channel-first inputs into channel-last ones: the layout
change is recorded per tensor in ``runtime.io`` (``transpose``) and the runner applies it, so users feed
the arrays they feed the ONNX model (the transposes are read from the TFLite shapes and, where a shape
leaves it open, chosen by agreement with ONNX Runtime on the check samples). Inputs that already look
channel-last (e.g. from tf2onnx) get onnx2tf's ``-kt`` hint; Slice nodes with unsorted constant ``axes`` are
reordered first (onnx2tf 1.28.8 turns them into no-ops otherwise, e.g. in tf2onnx exports).
``export_c`` also writes ``model_data.h``/``.c`` (firmware C array).

:func:`wrap_tflite` turns an existing ``.tflite`` file into an artifact (for bench/validation).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
from pathlib import Path

import numpy as np

from edgeopt.converters.backends.tflite_convert import (
    MODEL_FILE,
    IODtype,
    channel_last_perm,
    int8_file,
    looks_channel_last,
    run_onnx2tf,
    tf_name,
)
from edgeopt.converters.base import (
    Backend,
    ChainContext,
    ChainOptions,
    Format,
    Intermediate,
    RunFacts,
    StageConfig,
)
from edgeopt.converters.registry import register_stage
from edgeopt.enums import BackendName, Precision
from edgeopt.errors import BadModelError, MissingDependencyError, StageError, UnsupportedOpError, UsageError
from edgeopt.files import atomic_path

LOG_FILE = "onnx2tf.log"


class TFLiteConfig(StageConfig):
    precision: Precision = Precision.FP32
    io_dtype: IODtype = IODtype.FLOAT32  # INT8 models only: int8 or float32 model inputs/outputs
    threads: int | None = None
    delegate: str = "xnnpack"  # LiteRT's default CPU delegate
    per_channel: bool = True
    calib_samples: int = 200  # most calibration samples given to onnx2tf
    keep_layout: tuple[str, ...] | None = None  # inputs onnx2tf must not transpose (None: those that look NHWC)
    export_c: bool = False
    c_name: str = "model"  # C symbols g_<c_name>_model_data[_len] (--export-c uses the model's file name)
    timeout_s: float = 3600.0
    max_accuracy_drop: float | None = None  # INT8: the search of converters/quantize/tflite_search.py
    search_fraction: float = 0.5
    search_budget_s: float = 120.0
    min_speedup: float | None = None


@register_stage
class TFLiteBackend(Backend):
    name = "tflite"
    backend = BackendName.TFLITE
    Config = TFLiteConfig
    accepts = (Format.ONNX,)
    produces = Format.TFLITE
    extra = "tflite"
    requires = ("ai_edge_litert", "onnx2tf", "tensorflow")
    libraries = (("ai_edge_litert", "ai-edge-litert"), ("onnx2tf", "onnx2tf"), ("tensorflow", "tensorflow"))
    device_runtime = ("ai_edge_litert", "ai-edge-litert")
    deterministic = (False, "model.tflite was byte-identical across two clean builds (checked by hand on the digits "
                     "CNN), but the artifact keeps onnx2tf.log, which carries timestamps")
    preflight_check = "edgeopt.analyze.preflight:check_tflite"
    per_layer_profiler = "edgeopt.bench.per_layer:per_layer_tflite"  # LiteRT can't time ops: a static breakdown
    quantizes_itself = True
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8)

    @classmethod
    def configure(cls, options: ChainOptions) -> TFLiteConfig:
        s = options.backend_settings
        kw = {"precision": options.precision, "per_channel": options.per_channel,
              "threads": options.threads or s.get("threads"), "max_accuracy_drop": options.max_accuracy_drop,
              "search_budget_s": options.search_budget_s, "min_speedup": options.min_speedup}
        for key in ("io_dtype", "delegate", "calib_samples", "export_c"):
            if key in s:
                kw[key] = s[key]
        return TFLiteConfig(**kw)

    def run(self, model: Intermediate, config: TFLiteConfig, ctx: ChainContext) -> Intermediate:
        from edgeopt.deps import install_hint, require, version_of
        from edgeopt.model import graph_inputs, graph_outputs, load_onnx

        from .tflite_convert import ONNX2TF_PIN

        require("ai_edge_litert", "the TFLite backend")
        for module in ("onnx2tf", "tensorflow"):  # checked, not imported: they run in the subprocess
            if not _importable(module):
                raise MissingDependencyError(f"{module} is not installed (needed for converting to TFLite)",
                                             install_hint(module))
        if version_of("onnx2tf") != ONNX2TF_PIN:
            ctx.warn(f"tflite: onnx2tf {version_of('onnx2tf')} is installed; edgeopt is tested with {ONNX2TF_PIN}")
        proto = load_onnx(model.path, check=False)
        onnx_in, onnx_out = graph_inputs(proto), graph_outputs(proto)
        del proto
        keep = config.keep_layout if config.keep_layout is not None else tuple(
            t.name for t in onnx_in if looks_channel_last(t.shape))
        int8 = config.precision == Precision.INT8
        calib = self._calibration(onnx_in, keep, config, ctx) if int8 else None
        work = ctx.work_dir / "onnx2tf"
        log = ctx.artifact_dir / LOG_FILE
        float_out = None if int8 else work / "float.tflite"
        folder = run_onnx2tf(model.path, work, log, tflite_out=float_out, fp16=config.precision == Precision.FP16,
                             calib=calib, int8_io=config.io_dtype == IODtype.INT8, per_channel=config.per_channel,
                             keep_channel_last=keep, progress=ctx.progress, timeout_s=config.timeout_s)
        produced = int8_file(folder, config.io_dtype == IODtype.INT8) if int8 else float_out
        target = ctx.artifact_dir / MODEL_FILE
        with atomic_path(target) as tmp:
            shutil.copyfile(produced, tmp)

        runtime = {"backend": self.backend.value, "model": MODEL_FILE,
                   "settings": {"threads": config.threads, "delegate": config.delegate, "signature": "serving_default",
                                "io_dtype": config.io_dtype.value if int8 else "float32"}}
        runtime["io"], checks = self._io_map(model.path, target, onnx_in, onnx_out, keep, ctx, runtime)
        report = ctx.stage_report()
        if int8 and config.max_accuracy_drop is not None:
            from edgeopt.converters.quantize.tflite_search import search_tflite

            runtime, checks, report["accuracy_aware"] = search_tflite(
                self, model, config, ctx, onnx_in=onnx_in, onnx_out=onnx_out, keep=keep, calib=calib, folder=folder,
                target=target, runtime=runtime, checks=checks)
        ctx.record_checks(checks)
        report.update(converter=f"onnx2tf {version_of('onnx2tf')} (subprocess)", log=LOG_FILE,
                      tflite_bytes=target.stat().st_size, kept_layout=list(keep),
                      weights={"fp32": "float32", "fp16": "float16", "int8": "int8 (full integer)"}[config.precision.value])
        if int8:
            report.update(method=f"onnx2tf -oiqt ({'per-channel' if config.per_channel else 'per-tensor'})",
                          io_dtype=config.io_dtype.value,
                          calibration={"samples": len(next(iter(calib.values()))),
                                       "source": getattr(ctx.calib, "source", ""),
                                       "synthetic": bool(getattr(ctx.calib, "synthetic", False))})
        if config.export_c:
            from edgeopt.converters.c_export import write_c_array

            report["c_export"] = write_c_array(target, ctx.artifact_dir, config.c_name)
        notes = {**model.notes, "runtime": runtime}
        return Intermediate(target, Format.TFLITE, config.precision, notes)

    @classmethod
    def check_before_work(cls, config: StageConfig, facts: RunFacts) -> None:
        """INT8 calibration feeds every input as float: an integer input (token ids, bytes) can't be."""
        assert isinstance(config, TFLiteConfig)
        for t in facts.inputs if config.precision == Precision.INT8 else ():
            if np.dtype(t.dtype).kind != "f":
                raise UsageError(f"tflite: INT8 calibration needs float inputs; '{t.name}' is {t.dtype}",
                                 "use --precision fp32 or fp16 with the tflite backend")

    # ------------------------------------------------------------------ calibration
    @staticmethod
    def _calibration(onnx_in, keep, config: TFLiteConfig, ctx: ChainContext) -> dict[str, np.ndarray]:
        if ctx.calib is None or len(ctx.calib) == 0:
            raise UsageError("tflite: INT8 needs calibration data", "give --calib FILE.npz")
        feeds = ctx.calib.feeds(min(len(ctx.calib), config.calib_samples))
        out = {}
        TFLiteBackend.check_before_work(config, RunFacts(inputs=tuple(onnx_in)))
        for t in onnx_in:
            arr = np.concatenate([np.asarray(f[t.name], np.float32) for f in feeds], axis=0)
            if len(t.shape) >= 3 and t.name not in keep:
                arr = np.transpose(arr, channel_last_perm(len(t.shape)))  # NCHW -> NHWC as onnx2tf's -cind wants
            out[t.name] = arr
        return out

    # ------------------------------------------------------------------ io map and check
    def _io_map(self, onnx_path, tflite_path, onnx_in, onnx_out, keep, ctx: ChainContext, runtime: dict):
        from edgeopt.runtime.runners.tflite import open_interpreter, unresolved_op

        try:
            interp = open_interpreter(str(tflite_path))
        except RuntimeError as err:
            op = unresolved_op(str(err))
            if op:
                raise UnsupportedOpError(f"tflite: the converted model needs op '{op}', which LiteRT cannot run",
                                         "use another --backend") from err
            raise
        sigs = interp.get_signature_list()
        if "serving_default" not in sigs:
            raise StageError("tflite: the converted model has no 'serving_default' signature", "see onnx2tf.log")
        sig = interp.get_signature_runner("serving_default")
        ins, outs = dict(sig.get_input_details()), dict(sig.get_output_details())
        del sig, interp
        in_names = list(ins)
        inputs = []
        for i, t in enumerate(onnx_in):
            rt = next((n for n in (t.name, tf_name(t.name)) if n in ins), None)
            if rt is None:
                rt = in_names[i] if len(in_names) == len(onnx_in) else None
            if rt is None:
                raise StageError(f"tflite: cannot find ONNX input '{t.name}' in the TFLite signature ({in_names})",
                                 "see onnx2tf.log")
            inputs.append((t, rt, _perms(t.shape, ins[rt]["shape"], prefer_transposed=t.name not in keep)))
        outputs = []
        for i, t in enumerate(onnx_out):
            rt = f"output_{i}"
            if rt not in outs:
                raise StageError(f"tflite: the signature has no '{rt}' for ONNX output '{t.name}'", "see onnx2tf.log")
            outputs.append((t, rt, _perms(t.shape, outs[rt]["shape"], prefer_transposed=False)))
        return _choose(onnx_path, inputs, outputs, ctx, runtime)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _perms(onnx_shape, tfl_shape, prefer_transposed: bool) -> list:
    """Candidate ``transpose`` values mapping the ONNX shape to the TFLite one, most likely first."""
    onnx_shape, tfl_shape = [int(d) for d in onnx_shape], [int(d) for d in tfl_shape]
    cands = []
    if len(onnx_shape) >= 3:
        perm = channel_last_perm(len(onnx_shape))
        if [onnx_shape[p] for p in perm] == tfl_shape:
            cands.append(perm)
    if onnx_shape == tfl_shape:
        cands.insert(0 if not prefer_transposed else len(cands), None)
    if not cands:
        raise StageError(f"tflite: TFLite tensor shape {tfl_shape} does not match ONNX shape {onnx_shape}",
                         "see onnx2tf.log; try keep_layout in the recipe's stages.tflite")
    return cands


def _choose(onnx_path, inputs, outputs, ctx: ChainContext, runtime: dict):
    """Pick the io map (transposes) whose outputs agree best with ONNX Runtime, then check it."""
    from edgeopt.converters.checks import compare, ort_run_fn
    from edgeopt.runtime.runners.tflite import Runner

    data = ctx.check_samples or ctx.calib
    feeds = data.feeds(8) if data is not None else []
    combos = list(itertools.islice(itertools.product(*[c for _, _, c in inputs + outputs]), 16))

    def io_of(combo):
        k = len(inputs)
        return {"inputs": [{"name": t.name, "runtime_name": rt, "transpose": p}
                           for (t, rt, _), p in zip(inputs, combo[:k], strict=True)],
                "outputs": [{"name": t.name, "runtime_name": rt, "transpose": p}
                            for (t, rt, _), p in zip(outputs, combo[k:], strict=True)]}

    if not feeds:
        return io_of(combos[0]), {"skipped": "no check samples"}
    ref = ort_run_fn(Path(onnx_path))
    best, last = None, None
    for combo in combos:
        io = io_of(combo)
        manifest = {"runtime": {**runtime, "io": io}, "inputs": [], "outputs": []}
        try:
            runner = Runner(str(ctx.artifact_dir), manifest, threads=ctx.threads)
            result = compare(ref, lambda f, r=runner: r.run({k: np.asarray(v) for k, v in f.items()}), feeds)
        except Exception as err:  # noqa: BLE001 - a wrong transpose fails to run: try the next
            last = err
            continue
        if best is None or (result["cosine_min"] or -1) > (best[1]["cosine_min"] or -1):
            best = (io, result)
        if len(combos) == 1:
            break
    if best is None:
        first = (str(last).strip().splitlines() or [type(last).__name__])[0][:200]
        raise StageError(f"tflite: the converted model does not run: {first}", "see onnx2tf.log")
    return best[0], best[1]


# --------------------------------------------------------------------------- existing .tflite files


def tflite_specs(path: str | os.PathLike) -> tuple[list[dict], list[dict], str]:
    """(inputs, outputs, precision) of a ``.tflite`` as manifest tensor entries; UnsupportedOpError for
    a model LiteRT cannot run (a custom op), BadModelError for a file it cannot read."""
    from edgeopt.runtime.runners.tflite import open_interpreter, unresolved_op

    try:
        interp = open_interpreter(str(path))
    except (RuntimeError, ValueError) as err:
        op = unresolved_op(str(err))
        if op:
            raise UnsupportedOpError(f"{Path(path).name}: needs the op '{op}', which LiteRT cannot run "
                                     "(a custom op not built into ai-edge-litert)",
                                     "register the op in your own LiteRT build, or use a model without it") from err
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise BadModelError(f"{Path(path).name}: not a model LiteRT can load: {first}", "check the file") from err
    sigs = interp.get_signature_list()
    if sigs:
        sig = interp.get_signature_runner(next(iter(sigs)))
        ins, outs = dict(sig.get_input_details()), dict(sig.get_output_details())
        order = sigs[next(iter(sigs))]
        ins = {n: ins[n] for n in order["inputs"]}
        outs = {n: outs[n] for n in order["outputs"]}
    else:
        ins = {d["name"]: d for d in interp.get_input_details()}
        outs = {d["name"]: d for d in interp.get_output_details()}
    quantized = any(np.dtype(d["dtype"]).kind in "iu" and d["quantization"][0] for d in {**ins, **outs}.values())

    def entry(name, d):
        dt = np.dtype(d["dtype"])
        return {"name": name, "shape": [int(x) for x in d["shape"]],
                "dtype": "float32" if dt.kind in "iu" and d["quantization"][0] else dt.name}

    return ([entry(n, d) for n, d in ins.items()], [entry(n, d) for n, d in outs.items()],
            "int8" if quantized else "fp32")


def wrap_tflite(path: str | os.PathLike, out_dir: str | os.PathLike, *, threads: int | None = None) -> Path:
    """An artifact directory (manifest + ``model.tflite``) for an existing ``.tflite`` file, written atomically."""
    import tempfile

    from edgeopt import __version__
    from edgeopt.artifact import Calibration, Manifest, SourceModel, TensorInfo, guess_layout, write_manifest
    from edgeopt.deps import version_of
    from edgeopt.files import file_sha256

    src, out = Path(path), Path(out_dir)
    if not src.is_file():
        raise BadModelError(f"'{src}' not found", "check the path")
    inputs, outputs, precision = tflite_specs(src)
    io = {kind: [{"name": t["name"], "runtime_name": t["name"], "transpose": None} for t in specs]
          for kind, specs in (("inputs", inputs), ("outputs", outputs))}
    manifest = Manifest(
        edgeopt_version=__version__, backend=BackendName.TFLITE.value, precision=precision, profile="none",
        source_model=SourceModel(path=str(src), sha256=file_sha256(src)),
        inputs=[TensorInfo(**t, layout=guess_layout(t["shape"])) for t in inputs],
        outputs=[TensorInfo(**t) for t in outputs],
        runtime={"backend": BackendName.TFLITE.value, "model": MODEL_FILE,
                 "settings": {"threads": threads, "delegate": "xnnpack"}, "io": io},
        stages=[], versions={"edgeopt": __version__, "ai-edge-litert": version_of("ai-edge-litert")},
        calibration=Calibration(), plan_hash="", plan={"note": "wrapped an existing .tflite; not converted"},
        warnings=["wrapped an existing .tflite as-is: not converted or validated by edgeopt"],
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        shutil.copyfile(src, tmp / MODEL_FILE)
        write_manifest(tmp, manifest)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def wrapped_tflite(path: str | os.PathLike) -> Path:
    """``wrap_tflite`` into the artifact cache (keyed by the file's sha256); reused when already there."""
    from edgeopt.files import file_sha256
    from edgeopt.paths import CacheArea, cache_subdir

    out = cache_subdir(CacheArea.ARTIFACTS) / f"tflite-file-{file_sha256(path)[:24]}"
    return out if (out / "manifest.json").is_file() else wrap_tflite(path, out)


BACKEND = TFLiteBackend
