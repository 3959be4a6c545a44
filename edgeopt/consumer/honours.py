"""Per backend and setting: whether the runtime's plain API applies it from the model file alone, and how a
consumer applies it (what ``load.py``/``load.cc`` do)."""

from __future__ import annotations

# backend -> setting -> (plain_api_honours, how it is applied or why it is carried by the file)
SETTINGS: dict[str, dict[str, tuple[bool, str]]] = {
    "openvino": {
        "inference_precision": (False, "compile_model(..., INFERENCE_PRECISION_HINT); the IR's rt_info "
                                       "runtime_options are not applied for it (checked on OpenVINO 2026.4.1)"),
        "performance_hint": (False, "compile_model(..., PERFORMANCE_HINT)"),
        "threads": (False, "compile_model(..., INFERENCE_NUM_THREADS, NUM_STREAMS=1)"),
        "device": (False, "the device named to compile_model"),
    },
    "onnxruntime": {
        "graph_optimization_level": (False, "SessionOptions.graph_optimization_level (the default is ORT_ENABLE_ALL)"),
        "threads": (False, "SessionOptions.intra_op_num_threads"),
        "provider": (False, "InferenceSession(providers=...)"),
        "fallback_providers": (False, "InferenceSession(providers=...)"),
        "provider_options": (False, "InferenceSession(providers=[(name, options)])"),
        "disabled_optimizers": (False, "InferenceSession(disabled_optimizers=...); C/C++: the session config entry "
                                       "optimization.disable_specified_optimizers"),
        "allow_spinning": (False, "session config entry session.intra_op.allow_spinning"),
    },
    "tflite": {
        "threads": (False, "Interpreter(num_threads=...)"),
        "delegate": (True, "XNNPACK is LiteRT's default CPU delegate"),
        "signature": (True, "the signature is in the .tflite file"),
        "io_dtype": (True, "the input and output tensor types are in the .tflite file"),
    },
    "tvm": {
        "target": (True, "compiled into the library"),
        "arch": (True, "compiled into the library"),
        "tuning": (True, "the tuned schedules are compiled into the library"),
        "versions": (True, "informative"),
        "device": (False, "the device given to the VirtualMachine (tvm.cpu(0))"),
        "threads": (False, "TVM_NUM_THREADS in the environment"),
    },
}


def carried_settings(backend: str, settings: dict) -> list[dict]:
    """Each setting of the manifest with its value, whether the plain API honours it from the file alone, and
    how ``load.py``/``load.cc`` apply it (a setting not known here: not honoured, applied as the runner does)."""
    table = SETTINGS.get(backend, {})
    out = []
    for name, value in settings.items():
        honours, how = table.get(name, (False, "applied by load.py as edgeopt's runner applies it"))
        out.append({"name": name, "value": value, "plain_api_honours": honours, "how": how})
    return out
