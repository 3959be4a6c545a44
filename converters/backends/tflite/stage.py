"""Backend ``tflite``: ONNX -> TFLite (LiteRT) FP32 / FP16 with onnx2tf, INT8 with ai-edge-quantizer.

The conversion runs onnx2tf in a subprocess (:mod:`.convert`; TensorFlow never enters this
process), on a copy of the model, with its output streamed to ``onnx2tf.log`` in the artifact; on any
failure that log is kept beside the output (``<output>.onnx2tf.log``) and the message says so. The
``.tflite``'s output shapes are checked against the ONNX outputs first (:func:`check_output_shapes`).
INT8 quantizes that float ``.tflite`` with ``ai-edge-quantizer`` (:mod:`.quantizer`):
static INT8 calibrated on the user's data, fed through the model's signature, so integer inputs (token
ids, bytes) stay integer; ``io_dtype`` picks float32 (quantize/dequantize inside) or int8 model
inputs/outputs; with ``--max-accuracy-drop`` the search (:mod:`.search`) keeps named ops
float. onnx2tf turns channel-first inputs into channel-last ones: the layout change is recorded per
tensor in ``runtime.io`` (``transpose``) and the runner applies it, so users feed the arrays they feed
the ONNX model (the transposes are read from the TFLite shapes and, where a shape leaves it open, chosen
by agreement with ONNX Runtime on the check samples). Inputs that already look channel-last (e.g. from
tf2onnx) get onnx2tf's ``-kt`` hint. ``export_c`` also writes ``model_data.h``/``.c`` (firmware C array).

:func:`edgeopt.wrapped_artifact.wrap_model_file` turns an existing ``.tflite`` file into an artifact (for bench/validation).
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
from pathlib import Path

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.backends.tflite.convert import (
    LOG_HINT,
    MODEL_FILE,
    IODtype,
    channel_last_perm,
    looks_channel_last,
    run_onnx2tf,
    tf_name,
)
from edgeopt.converters.backends.tflite.micro.target import MicroTarget
from edgeopt.converters.base import (
    Backend,
    ChainContext,
    ChainOptions,
    Format,
    Intermediate,
    StageConfig,
    from_option,
    user_option,
)
from edgeopt.converters.registry import register_stage
from edgeopt.enums import BackendName, Precision, QuantMode
from edgeopt.errors import (
    EdgeoptError,
    MissingDependencyError,
    StageError,
    UnsupportedOpError,
    UsageError,
)
from edgeopt.files import atomic_path

LOG_FILE = "onnx2tf.log"


class TFLiteConfig(StageConfig):
    precision: Precision = from_option("precision", Precision.FP32)
    io_dtype: IODtype = IODtype.FLOAT32  # INT8 models only: int8 or float32 model inputs/outputs
    threads: int | None = from_option("threads")
    delegate: str = "xnnpack"  # LiteRT's default CPU delegate
    per_channel: bool = from_option("per_channel", True)
    mode: QuantMode = from_option("quant_mode")  # --quant-mode: static, dynamic-range or weight-only
    calib_samples: int = 200  # most calibration samples given to the quantizer
    keep_layout: tuple[str, ...] | None = None  # inputs onnx2tf must not transpose (None: those that look NHWC)
    export_c: bool = user_option(False, "Also write the model as a C array for firmware (model_data.h/.c); "
                                        "TFLite only.")
    c_name: str = user_option("model", "With --export-c: the C symbols' name, g_<c_name>_model_data[_len] "
                                       "(convert uses the model's file name).")
    timeout_s: float = 3600.0
    micro: MicroTarget | None = None  # a microcontroller profile's core: TFLite Micro checks and the firmware build
    bound: AccuracyBound = AccuracyBound()  # INT8: the search of converters/backends/tflite/search.py (the planner's)


@register_stage
class TFLiteBackend(Backend):
    name = "tflite"
    backend = BackendName.TFLITE
    Config = TFLiteConfig
    accepts = (Format.ONNX,)
    produces = Format.TFLITE
    extra = "tflite"
    requires = ("ai_edge_litert", "onnx2tf", "tensorflow", "ai_edge_quantizer")
    libraries = (("ai_edge_litert", "ai-edge-litert"), ("onnx2tf", "onnx2tf"), ("tensorflow", "tensorflow"),
                 ("ai_edge_quantizer", "ai-edge-quantizer"))
    other_libraries = (("tflite_micro", "tflite-micro", "micro"),)  # microcontroller profiles: TFLite Micro
    device_runtime = ("ai_edge_litert", "ai-edge-litert")
    deterministic = (False, "model.tflite was byte-identical across two clean builds (checked by hand on the digits "
                     "CNN), but the artifact keeps onnx2tf.log, which carries timestamps")
    preflight_check = "edgeopt.converters.backends.tflite.preflight:check_tflite"
    per_layer_profiler = "edgeopt.converters.backends.tflite.per_layer:per_layer_tflite"  # LiteRT can't time ops: a static breakdown
    quantizes_itself = True
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8)
    quantizer = "edgeopt.converters.backends.tflite.quantizer:TFLiteQuantizer"
    hooks = "edgeopt.converters.backends.tflite.hooks:HOOKS"

    @classmethod
    def configure(cls, options: ChainOptions) -> TFLiteConfig:
        s = options.backend_settings
        kw = {key: s[key] for key in ("io_dtype", "delegate", "calib_samples", "export_c", "micro") if key in s}
        # the options over the profile's settings (--export-c, --per-channel, --quant-mode…)
        return TFLiteConfig(**{**kw, **options.for_config(TFLiteConfig), "threads": options.threads or s.get("threads")})

    def run(self, model: Intermediate, config: TFLiteConfig, ctx: ChainContext) -> Intermediate:
        """Convert, then quantize; any failure keeps onnx2tf's log beside the output and says where."""
        try:
            return self._run(model, config, ctx)
        except EdgeoptError as err:
            _keep_log(err, ctx)
            raise

    def _run(self, model: Intermediate, config: TFLiteConfig, ctx: ChainContext) -> Intermediate:
        from edgeopt.deps import install_hint, require, version_of
        from edgeopt.model import graph_inputs, graph_outputs, load_onnx

        from .convert import ONNX2TF_PIN

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
        float_out = ctx.work_dir / "onnx2tf" / "float.tflite"
        run_onnx2tf(model.path, ctx.work_dir / "onnx2tf", ctx.artifact_dir / LOG_FILE, tflite_out=float_out,
                    fp16=config.precision == Precision.FP16, keep_channel_last=keep, progress=ctx.progress,
                    timeout_s=config.timeout_s)
        check_output_shapes(float_out, onnx_out)  # before anything else: a wrong shape is a wrong model
        target = ctx.artifact_dir / MODEL_FILE
        with atomic_path(target) as tmp:
            shutil.copyfile(float_out, tmp)
        runtime = {"backend": self.backend.value, "model": MODEL_FILE,
                   "settings": {"threads": config.threads, "delegate": config.delegate, "signature": "serving_default",
                                "io_dtype": "float32"}}
        runtime["io"], checks = self._io_map(model.path, target, onnx_in, onnx_out, keep, ctx, runtime)
        report = ctx.stage_report()
        report.update(converter=f"onnx2tf {version_of('onnx2tf')} (subprocess)", log=LOG_FILE, kept_layout=list(keep),
                      weights={"fp32": "float32", "fp16": "float16", "int8": "int8"}[config.precision.value])
        if int8:
            runtime["settings"]["io_dtype"] = config.io_dtype.value
            checks = self._int8(model, config, ctx, float_out, target, runtime, report)
        ctx.record_checks(checks)
        report["tflite_bytes"] = target.stat().st_size
        if config.micro is not None:  # TFLite Micro: ops, run, arena, the C array with its header, the firmware
            from edgeopt.converters.backends.tflite.micro.check import micro_checks

            report["micro"] = micro_checks(target, Path(model.path), runtime, ctx.eval or ctx.check_samples or ctx.calib,
                                           config.micro, bound=config.bound.max_accuracy_drop, c_name=config.c_name,
                                           out_dir=ctx.artifact_dir)
            report["c_export"] = report["micro"]["c_export"]
        elif config.export_c:
            from edgeopt.converters.c_export import write_c_array

            report["c_export"] = write_c_array(target, ctx.artifact_dir, config.c_name)
        notes = {**model.notes, "runtime": runtime}
        return Intermediate(target, Format.TFLITE, config.precision, notes)

    # ------------------------------------------------------------------ INT8 (ai-edge-quantizer)
    def _int8(self, model: Intermediate, config: TFLiteConfig, ctx: ChainContext, float_tflite: Path, target: Path,
              runtime: dict, report: dict) -> dict:
        """Quantize the float ``.tflite`` into ``target`` (static INT8 on ``--calib``; with
        ``--max-accuracy-drop`` the search of :mod:`.search`); returns the checks vs ONNX."""
        from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
        from edgeopt.converters.quantize.modes import DynamicMode, Granularity, StaticMode
        from edgeopt.deps import version_of

        if ctx.calib is None or len(ctx.calib) == 0:
            raise UsageError("tflite: INT8 needs calibration data", "give --calib FILE.npz")
        quantizer = TFLiteQuantizer(runtime["io"]["inputs"], samples=config.calib_samples,
                                    float_io=config.io_dtype == IODtype.FLOAT32)
        report["calibration"] = {"samples": min(len(ctx.calib), config.calib_samples),
                                 "source": getattr(ctx.calib, "source", ""),
                                 "synthetic": bool(getattr(ctx.calib, "synthetic", False))}
        report["io_dtype"] = config.io_dtype.value
        gran = Granularity.PER_CHANNEL if config.per_channel else Granularity.PER_TENSOR
        if config.bound.max_accuracy_drop is not None:
            from edgeopt.converters.backends.tflite.search import search_tflite

            made, report["accuracy_aware"] = search_tflite(self, quantizer, float_tflite, model, config, ctx,
                                                           runtime=runtime, granularity=gran)
        elif config.mode != QuantMode.AUTO:  # --quant-mode: that mode, or its failure
            made = quantizer.quantize(float_tflite, quantizer.mode_configs(config.mode, gran)[0],
                                      ctx.work_dir / "int8.tflite", calib=ctx.calib)
        else:
            try:
                made = quantizer.quantize(float_tflite, StaticMode(granularity=gran), ctx.work_dir / "int8.tflite",
                                          calib=ctx.calib)
            except StageError as err:  # e.g. a recurrent layer's WHILE loop, which static INT8 cannot calibrate
                ctx.warn(f"tflite: static INT8 could not be made ({err.message.removeprefix('tflite: ')}); "
                         "wrote dynamic-range INT8 (INT8 weights, activations quantized at run time)")
                report["static_failed"] = err.message
                made = quantizer.quantize(float_tflite, DynamicMode(), ctx.work_dir / "int8.tflite")
        with atomic_path(target) as tmp:
            shutil.copyfile(made.path, tmp)
        report.update(method=f"ai-edge-quantizer {version_of('ai-edge-quantizer')}: {made.mode.label()}",
                      quantized_ops=made.notes["quantized_ops"], float_ops=made.notes["float_ops"],
                      kept_in_float=list(made.kept_float), forced_float=made.notes.get("forced_float", []))
        return self.checks(model.path, runtime, ctx)

    # ------------------------------------------------------------------ io map and check
    def _io_map(self, onnx_path, tflite_path, onnx_in, onnx_out, keep, ctx: ChainContext, runtime: dict):
        sig = _signature(tflite_path)
        ins, outs = dict(sig.get_input_details()), dict(sig.get_output_details())
        del sig
        in_names = list(ins)
        inputs = []
        for i, t in enumerate(onnx_in):
            rt = next((n for n in (t.name, tf_name(t.name)) if n in ins), None)
            if rt is None:
                rt = in_names[i] if len(in_names) == len(onnx_in) else None
            if rt is None:
                raise StageError(f"tflite: cannot find ONNX input '{t.name}' in the TFLite signature ({in_names})",
                                 LOG_HINT)
            inputs.append((t, rt, _perms(t.shape, ins[rt]["shape"], prefer_transposed=t.name not in keep)))
        outputs = [(t, f"output_{i}", _perms(t.shape, outs[f"output_{i}"]["shape"], prefer_transposed=False))
                   for i, t in enumerate(onnx_out)]
        return _choose(onnx_path, inputs, outputs, ctx, runtime)

    @staticmethod
    def checks(onnx_path, runtime: dict, ctx: ChainContext) -> dict:
        """The artifact's model (``runtime``'s io map) against ONNX Runtime on the check samples."""
        data = ctx.check_samples or ctx.calib
        feeds = data.feeds(8) if data is not None else []
        if not feeds:
            return {"skipped": "no check samples"}
        return _compare(onnx_path, runtime, runtime["io"], ctx, feeds)


def _signature(tflite_path):
    from edgeopt.runtime.runners.tflite import open_interpreter, unresolved_op

    try:
        interp = open_interpreter(str(tflite_path))
    except RuntimeError as err:
        op = unresolved_op(str(err))
        if op:
            raise UnsupportedOpError(f"tflite: the converted model needs op '{op}', which LiteRT cannot run",
                                     "use another --backend") from err
        raise
    if "serving_default" not in interp.get_signature_list():
        raise StageError("tflite: the converted model has no 'serving_default' signature", LOG_HINT)
    return interp.get_signature_runner("serving_default")


def check_output_shapes(tflite_path, onnx_out) -> None:
    """Each ONNX output against the ``.tflite``'s ``output_<i>``: the same shape, or its channel-last form;
    anything else is exit 3 naming the output and both shapes."""
    outs = dict(_signature(tflite_path).get_output_details())
    if len(outs) != len(onnx_out):
        raise StageError(f"tflite: the .tflite has {len(outs)} outputs where the ONNX model has {len(onnx_out)}",
                         LOG_HINT)
    for i, t in enumerate(onnx_out):
        got = [int(d) for d in outs[f"output_{i}"]["shape"]] if f"output_{i}" in outs else None
        want = [int(d) if isinstance(d, int) else -1 for d in t.shape]
        ok = got is not None and len(got) == len(want) and any(
            all(w in (-1, g) for w, g in zip(p, got, strict=True))
            for p in (want, [want[k] for k in channel_last_perm(len(want))] if len(want) >= 3 else want))
        if not ok:
            raise StageError(f"tflite: output '{t.name}' has shape {got} in the .tflite but {want} in the ONNX model "
                             "(onnx2tf converted it wrongly)", f"use another --backend; {LOG_HINT}")


def _keep_log(err: EdgeoptError, ctx: ChainContext) -> None:
    """The artifact's temporary dir goes on failure: keep onnx2tf's log beside the output
    (``<output>.onnx2tf.log``) and make the error's hint say so."""
    log = ctx.artifact_dir / LOG_FILE
    if not log.is_file() or LOG_HINT not in f"{err.hint}":
        return
    name = ctx.artifact_dir.name
    kept = ctx.artifact_dir.with_name(f"{name.rsplit('.tmp-', 1)[0]}.{LOG_FILE}" if ".tmp-" in name else f"{name}.{LOG_FILE}")
    try:
        with atomic_path(kept) as tmp:
            shutil.copyfile(log, tmp)
    except OSError:
        err.hint = err.hint.replace(LOG_HINT, "onnx2tf's log could not be kept")
        return
    err.hint = err.hint.replace(LOG_HINT, f"onnx2tf's log: {kept}")


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
                         f"{LOG_HINT}; for an input already channel-last, name it in keep_layout (recipe stages.tflite)")
    return cands


def _choose(onnx_path, inputs, outputs, ctx: ChainContext, runtime: dict):
    """Pick the io map (transposes) whose outputs agree best with ONNX Runtime, then check it."""
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
    best, last = None, None
    for combo in combos:
        io = io_of(combo)
        try:
            result = _compare(onnx_path, runtime, io, ctx, feeds)
        except StageError as err:  # a wrong transpose fails to run: try the next
            last = err
            continue
        if best is None or (result["cosine_min"] or -1) > (best[1]["cosine_min"] or -1):
            best = (io, result)
        if len(combos) == 1:
            break
    if best is None:
        raise last
    return best[0], best[1]


def _compare(onnx_path, runtime: dict, io: dict, ctx: ChainContext, feeds) -> dict:
    """The artifact's model with ``io`` against ONNX Runtime on ``feeds`` (``converters.checks.compare``)."""
    from edgeopt.converters.checks import compare
    from edgeopt.runtime.run_fn import run_fn

    try:
        return compare(run_fn(Path(onnx_path)), run_fn(ctx.artifact_dir, ctx.threads, runtime={**runtime, "io": io}),
                       feeds)
    except Exception as err:  # noqa: BLE001 - LiteRT's own errors: one line naming the stage
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise StageError(f"tflite: the converted model does not run: {first}", LOG_HINT) from err


BACKEND = TFLiteBackend
