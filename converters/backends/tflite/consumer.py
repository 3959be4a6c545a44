"""LiteRT's part of the files written beside an artifact for its consumer: ``load.py``'s runtime part
(``load_template.py`` beside this file), ``load.cc`` (the interpreter made with the judged threads and signature:
a sketch, no TensorFlow Lite C++ SDK can be had from pip or Debian to build it against) and what LiteRT's plain
API honours."""

from __future__ import annotations

from edgeopt.consumer.cc_io import MAIN, quoted

# setting -> (whether the plain API applies it from the .tflite file alone, how load.py/load.cc apply it)
PLAIN_API: dict[str, tuple[bool, str]] = {
    "threads": (False, "Interpreter(num_threads=...)"),
    "delegate": (True, "XNNPACK is LiteRT's default CPU delegate"),
    "signature": (True, "the signature is in the .tflite file"),
    "io_dtype": (True, "the input and output tensor types are in the .tflite file"),
}


def load_cc(runtime: dict, manifest: dict) -> str:
    s = runtime.get("settings") or {}
    threads = int(s["threads"]) if s.get("threads") else -1
    body = (f"    auto model = tflite::FlatBufferModel::BuildFromFile((dir + \"/{runtime['model']}\").c_str());\n"
            "    tflite::ops::builtin::BuiltinOpResolver resolver;  // XNNPACK applies by default\n"
            "    tflite::InterpreterBuilder builder(*model, resolver);\n"
            f"    builder.SetNumThreads({threads});\n"
            "    std::unique_ptr<tflite::Interpreter> interpreter;\n"
            "    if (builder(&interpreter) != kTfLiteOk || interpreter->AllocateTensors() != kTfLiteOk) return 1;\n"
            f"    auto* runner = interpreter->GetSignatureRunner({quoted(s.get('signature') or 'serving_default')});\n"
            "    // inputs are in the runtime's layout (see manifest.json runtime.io: transpose), int8 where quantized\n"
            "    (void)runner;")
    return ("// Build against LiteRT / TensorFlow Lite (tensorflow/lite), e.g. with its CMake project\n"
            "#include <memory>\n#include <string>\n#include \"tensorflow/lite/interpreter.h\"\n"
            "#include \"tensorflow/lite/kernels/register.h\"\n#include \"tensorflow/lite/model.h\"\n"
            + MAIN % body)
