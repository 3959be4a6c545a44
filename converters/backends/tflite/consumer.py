"""LiteRT's part of the files written beside an artifact for its consumer: ``load.py``'s runtime part
(``load_template.py`` beside this file), ``load.cc`` (TensorFlow Lite's C++ API: the interpreter made with the
judged threads, the signature run with the ONNX model's names and layout, int8 tensors quantized with their own
scale and zero point, as ``load.py`` does) and what LiteRT's plain API honours.

``load.cc`` builds against TensorFlow Lite's C++ headers and ``libtensorflow-lite`` (Debian's
``libtensorflow-lite-dev``, or LiteRT's CMake project); the tests compile and run it in a Debian root that has them
(``make tflite-sdk``)."""

from __future__ import annotations

from edgeopt.consumer.cc_io import HELPERS, INCLUDES, MAIN, inputs_table, quoted

# setting -> (whether the plain API applies it from the .tflite file alone, how load.py/load.cc apply it)
PLAIN_API: dict[str, tuple[bool, str]] = {
    "threads": (False, "Interpreter(num_threads=...)"),
    "delegate": (True, "XNNPACK is LiteRT's default CPU delegate"),
    "signature": (True, "the signature is in the .tflite file"),
    "io_dtype": (True, "the input and output tensor types are in the .tflite file"),
}


def _io_rows(ios: list[dict]) -> str:
    rows = [f"    {{{quoted(io['name'])}, {quoted(io.get('runtime_name') or io['name'])}, "
            f"{{{', '.join(str(int(a)) for a in io.get('transpose') or [])}}}}}" for io in ios]
    return "{\n" + ",\n".join(rows) + "}"


def load_cc(runtime: dict, manifest: dict) -> str:
    s = runtime.get("settings") or {}
    threads = int(s["threads"]) if s.get("threads") else -1
    io = runtime.get("io") or {}
    ins = io.get("inputs") or [{"name": t["name"]} for t in manifest["inputs"]]
    by_name = {i["name"]: i for i in ins}
    ins = [by_name.get(t["name"], {"name": t["name"]}) for t in manifest["inputs"]]  # INPUTS' order
    outs = io.get("outputs") or [{"name": t["name"]} for t in manifest["outputs"]]
    body = (f"    auto model = tflite::FlatBufferModel::BuildFromFile((dir + \"/{runtime['model']}\").c_str());\n"
            "    if (!model) { std::cerr << \"can't read the model\" << std::endl; return 1; }\n"
            "    tflite::ops::builtin::BuiltinOpResolver resolver;  // XNNPACK applies by default\n"
            "    tflite::InterpreterBuilder builder(*model, resolver);\n"
            f"    builder.SetNumThreads({threads});  // the thread count the artifact was judged at\n"
            "    std::unique_ptr<tflite::Interpreter> interpreter;\n"
            "    if (builder(&interpreter) != kTfLiteOk) return 1;\n"
            f"    const char* key = {quoted(s.get('signature') or 'serving_default')};\n" + _LITERT_RUN)
    from edgeopt.deps import version_of

    judged = f"ai-edge-litert {version_of('ai-edge-litert') or '?'}"
    return ("// Build: g++ -std=c++17 load.cc -ltensorflow-lite  (TensorFlow Lite's C++ headers and library: Debian's\n"
            "// libtensorflow-lite-dev, or LiteRT's CMake project)\n"
            f"// Judged with {judged}: link that LiteRT or a later one. An older TensorFlow Lite may lack an int8\n"
            "// kernel (Debian's 2.14 has no int8 SQRT) or compute some int8 ops differently.\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <cmath>\n#include <cstring>\n#include <memory>\n"
            "#include \"tensorflow/lite/interpreter.h\"\n#include \"tensorflow/lite/kernels/register.h\"\n"
            "#include \"tensorflow/lite/model.h\"\n#include \"tensorflow/lite/signature_runner.h\"\n"
            + INCLUDES + HELPERS + inputs_table(manifest)
            + "// each ONNX input and output: its name in the .tflite signature and the axes ONNX -> LiteRT\n"
            + "struct Io { const char* name; const char* runtime_name; std::vector<int> transpose; };\n"
            + f"static const std::vector<Io> INPUT_IO = {_io_rows(ins)};\n"
            + f"static const std::vector<Io> OUTPUT_IO = {_io_rows(outs)};\n" + _LITERT_HELPERS + MAIN % body)



_LITERT_HELPERS = r"""
// np.transpose(src, perm) of a C-order array of `item`-byte elements; an empty perm copies
static std::vector<char> transposed(const std::vector<char>& src, const std::vector<int64_t>& shape,
                                    const std::vector<int>& perm, size_t item) {
    if (perm.empty()) return src;
    const size_t rank = shape.size();
    std::vector<int64_t> stride(rank, 1), out_shape(rank), idx(rank, 0);
    for (size_t k = rank; k-- > 1;) stride[k - 1] = stride[k] * shape[k];
    for (size_t k = 0; k < rank; ++k) out_shape[k] = shape[perm[k]];
    std::vector<char> dst(src.size());
    for (size_t n = 0, total = element_count(shape); n < total; ++n) {
        int64_t offset = 0;
        for (size_t k = 0; k < rank; ++k) offset += idx[k] * stride[perm[k]];
        std::memcpy(&dst[n * item], &src[offset * item], item);
        for (size_t k = rank; k-- > 0;) {
            if (++idx[k] < out_shape[k]) break;
            idx[k] = 0;
        }
    }
    return dst;
}

static std::vector<int64_t> dims_of(const TfLiteTensor* t) {
    return std::vector<int64_t>(t->dims->data, t->dims->data + t->dims->size);
}

// an input's bytes (ONNX layout, the manifest's dtype) into the LiteRT tensor: axes moved, float quantized to an
// int8/uint8 tensor with the tensor's own scale and zero point
static void set_input(TfLiteTensor* t, const Io& io, const Input& in, const std::vector<char>& data) {
    std::vector<char> moved = transposed(data, in.shape, io.transpose, in.item_size);
    const size_t n = element_count(in.shape);
    if ((t->type == kTfLiteInt8 || t->type == kTfLiteUInt8) && in.item_size == sizeof(float)) {
        const float* x = reinterpret_cast<const float*>(moved.data());
        const float lo = t->type == kTfLiteInt8 ? -128.f : 0.f, hi = t->type == kTfLiteInt8 ? 127.f : 255.f;
        for (size_t k = 0; k < n; ++k) {
            const float q = std::fmin(hi, std::fmax(lo, std::nearbyint(x[k] / t->params.scale) + t->params.zero_point));
            if (t->type == kTfLiteInt8) t->data.int8[k] = static_cast<int8_t>(q);
            else t->data.uint8[k] = static_cast<uint8_t>(q);
        }
        return;
    }
    if (moved.size() != t->bytes) {
        std::cerr << "input " << in.name << ": " << moved.size() << " bytes for a tensor of " << t->bytes << std::endl;
        std::exit(2);
    }
    std::memcpy(t->data.raw, moved.data(), moved.size());
}

// an output as float64 (int8/uint8 dequantized with the tensor's scale and zero point), axes moved back to ONNX's
static void print_litert(const Io& io, const TfLiteTensor* t) {
    const std::vector<int64_t> shape = dims_of(t);
    const size_t n = element_count(shape);
    std::vector<double> v(n);
    for (size_t k = 0; k < n; ++k) {
        switch (t->type) {
            case kTfLiteFloat32: v[k] = t->data.f[k]; break;
            case kTfLiteInt8: v[k] = (t->data.int8[k] - t->params.zero_point) * double(t->params.scale ? t->params.scale : 1); break;
            case kTfLiteUInt8: v[k] = (t->data.uint8[k] - t->params.zero_point) * double(t->params.scale ? t->params.scale : 1); break;
            case kTfLiteInt32: v[k] = t->data.i32[k]; break;
            case kTfLiteInt64: v[k] = double(t->data.i64[k]); break;
            case kTfLiteBool: v[k] = t->data.b[k]; break;
            default: std::cerr << "output " << io.name << ": tensor type " << t->type << " not printed" << std::endl; return;
        }
    }
    std::vector<int> back(io.transpose.size());  // the inverse permutation: LiteRT's axes -> ONNX's
    for (size_t k = 0; k < io.transpose.size(); ++k) back[io.transpose[k]] = static_cast<int>(k);
    std::vector<char> raw(reinterpret_cast<const char*>(v.data()), reinterpret_cast<const char*>(v.data() + n));
    std::vector<char> onnx = transposed(raw, shape, back, sizeof(double));
    std::vector<int64_t> onnx_shape(shape.size());
    for (size_t k = 0; k < shape.size(); ++k) onnx_shape[k] = back.empty() ? shape[k] : shape[back[k]];
    print_output(io.name, onnx_shape);
    print_values<double>(onnx.data(), n);
    std::cout << std::endl;
}
"""

_LITERT_RUN = """    tflite::SignatureRunner* runner = interpreter->signature_keys().empty() ? nullptr
        : interpreter->GetSignatureRunner(key) ? interpreter->GetSignatureRunner(key)
        : interpreter->GetSignatureRunner(interpreter->signature_keys()[0]->c_str());
    if (runner ? runner->AllocateTensors() != kTfLiteOk : interpreter->AllocateTensors() != kTfLiteOk) return 1;
    auto by_name = [&](const std::vector<int>& ids, const char* name) -> TfLiteTensor* {
        for (int id : ids) if (std::strcmp(interpreter->tensor(id)->name, name) == 0) return interpreter->tensor(id);
        return nullptr;
    };
    for (size_t i = 0; i < INPUTS.size(); ++i) {
        TfLiteTensor* t = runner ? runner->input_tensor(INPUT_IO[i].runtime_name)
                                 : by_name(interpreter->inputs(), INPUT_IO[i].runtime_name);
        if (!t) { std::cerr << "no input " << INPUT_IO[i].runtime_name << " in the model" << std::endl; return 1; }
        set_input(t, INPUT_IO[i], INPUTS[i], input_bytes(INPUTS[i], i, argc, argv));
    }
    if ((runner ? runner->Invoke() : interpreter->Invoke()) != kTfLiteOk) return 1;
    std::cout.precision(9);
    for (const Io& io : OUTPUT_IO) {
        const TfLiteTensor* t = runner ? runner->output_tensor(io.runtime_name)
                                       : by_name(interpreter->outputs(), io.runtime_name);
        if (!t) { std::cerr << "no output " << io.runtime_name << " in the model" << std::endl; return 1; }
        print_litert(io, t);
    }"""
