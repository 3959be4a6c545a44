# ONNX Runtime: the session made with the settings the model was judged at. The .onnx file does not carry them:
# InferenceSession(path) applies every optimizer at ORT_ENABLE_ALL on all cores with the default providers.
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "model.onnx"  # filled in from the manifest
SETTINGS: dict = {}  # the manifest's runtime.settings (filled in)
IO: dict = {}  # the manifest's runtime.io (filled in; empty: names as in the ONNX model)
CPU = "CPUExecutionProvider"
TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
         "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
         "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def providers(settings: dict, available: list) -> list:
    """The artifact's provider (with its options, ``{work_dir}`` filled in) and fallbacks where present, the CPU
    last."""
    wanted = settings.get("provider") or CPU
    work = os.path.expanduser(os.environ.get("EDGEOPT_WORK_DIR") or "~/.cache/edgeopt-remote")
    out = []
    for name in dict.fromkeys([wanted, *(settings.get("fallback_providers") or ()), CPU]):
        if name not in available and name != CPU:
            continue
        options = dict(settings.get("provider_options") or {}) if name == wanted and name != CPU else {}
        for key, value in options.items():
            if isinstance(value, str) and "{work_dir}" in value:
                options[key] = value.replace("{work_dir}", work)
                if key.endswith("cache_path"):
                    os.makedirs(options[key], exist_ok=True)
        out.append((name, options) if options else name)
    return out


def session_options(ort, settings: dict):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                          settings.get("graph_optimization_level") or "ORT_ENABLE_ALL")
    if settings.get("threads"):
        so.intra_op_num_threads = int(settings["threads"])
    if settings.get("allow_spinning") is False:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def _name(provider) -> str:
    return provider[0] if isinstance(provider, tuple) else provider


def _kwargs(provs: list) -> dict:
    """The disabled optimizers apply where a provider other than the CPU is in the session; on the CPU alone
    ONNX Runtime fuses the int32-bias DequantizeLinear they would keep out into its integer kernels."""
    disabled = list(SETTINGS.get("disabled_optimizers") or [])
    return {"disabled_optimizers": disabled} if disabled and any(_name(p) != CPU for p in provs) else {}


def open_session(ort, path: str, so, provs: list):
    """(session, disabled optimizers applied). ONNX Runtime's own fallback, when a provider fails to load, makes
    the session again without ``disabled_optimizers``: then it is made again here on the providers that loaded."""
    kw = _kwargs(provs)
    session = ort.InferenceSession(path, so, providers=provs, **kw)
    used = session.get_providers()
    if kw and used and used[0] != _name(provs[0]):
        provs = [p for p in provs if _name(p) in used]
        kw = _kwargs(provs)
        session = ort.InferenceSession(path, so, providers=provs, **kw)
    return session, kw.get("disabled_optimizers", [])


def load(model_dir=None, *, bare=False):
    """A function running the model on numpy arrays keyed by the ONNX input names; ``bare``: default options."""
    import onnxruntime as ort

    path = os.path.join(model_dir or HERE, MODEL)
    if bare:
        session = ort.InferenceSession(path, providers=ort.get_available_providers())
    else:
        session, disabled = open_session(ort, path, session_options(ort, SETTINGS),
                                         providers(SETTINGS, ort.get_available_providers()))
    types = {i.name: TYPES.get(i.type) for i in session.get_inputs()}
    names = {io["name"]: io["runtime_name"] for io in IO.get("inputs", [])}
    out_names = [io["runtime_name"] for io in IO.get("outputs", [])] or [o.name for o in session.get_outputs()]
    onnx_names = [io["name"] for io in IO.get("outputs", [])] or out_names

    def run(feeds: dict) -> dict:
        given = {}
        for k, v in feeds.items():
            rt = names.get(k, k)
            given[rt] = np.asarray(v, dtype=types.get(rt)) if types.get(rt) is not None else np.asarray(v)
        return dict(zip(onnx_names, session.run(out_names, given), strict=True))

    run.applied = {"providers": session.get_providers(), "bare": bare,
                   "disabled_optimizers": [] if bare else disabled}
    run.settings = {} if bare else SETTINGS  # the settings this load applied
    return run
