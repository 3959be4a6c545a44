"""``load.cc``: the artifact's model loaded in C++ with the settings edgeopt judged it at (the runtime's C++ API).

ONNX Runtime's, OpenVINO's and TVM's run the model on raw input files and print its outputs (:mod:`.cc_io`),
OpenVINO's also the precision it compiled at; LiteRT's makes the interpreter with the judged threads
and signature (a sketch: no TensorFlow Lite C++ SDK can be had from pip or Debian to build it against).
"""

from __future__ import annotations

import json

from .cc_io import DTYPES, HELPERS, INCLUDES, inputs_table

_OV_TYPES = {"f32": "f32", "bf16": "bf16", "f16": "f16", "i8": "i8"}
_MAIN = """
int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";
%s
    return 0;
}
"""


def _q(text) -> str:
    return json.dumps(str(text))


def _openvino(runtime: dict, manifest: dict) -> str:
    s = runtime.get("settings") or {}
    hint = _OV_TYPES.get(s.get("inference_precision") or "f32", "f32")
    props = [f"ov::hint::inference_precision(ov::element::{hint})"]
    if s.get("threads"):
        props += [f"ov::inference_num_threads({int(s['threads'])})", "ov::num_streams(1)"]
    else:
        mode = (s.get("performance_hint") or "LATENCY").upper()
        props.append(f"ov::hint::performance_mode(ov::hint::PerformanceMode::{mode})")
    args = ",\n        ".join(props)
    body = ("    ov::Core core;\n"
            f"    ov::CompiledModel compiled = core.compile_model(dir + \"/{runtime['model']}\", "
            f"{_q(s.get('device') or 'CPU')},\n        {args});\n"
            "    std::cout << \"INFERENCE_PRECISION_HINT \" << compiled.get_property(ov::hint::inference_precision)"
            " << std::endl;\n"
            + _OV_RUN)
    return ("// Build: g++ -std=c++17 load.cc -I$OPENVINO/runtime/include -L$OPENVINO/runtime/lib/intel64 -lopenvino\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <openvino/openvino.hpp>\n#include <cstring>\n" + INCLUDES + HELPERS + inputs_table(manifest)
            + _OV_PRINT + _MAIN % body)


_OV_RUN = """    ov::InferRequest request = compiled.create_infer_request();
    for (size_t i = 0; i < INPUTS.size(); ++i) {  // by the ONNX input names, which the IR keeps
        std::vector<char> data = input_bytes(INPUTS[i], i, argc, argv);
        const ov::Output<const ov::Node> port = compiled.input(INPUTS[i].name);
        ov::Tensor tensor(port.get_element_type(), ov::Shape(INPUTS[i].shape.begin(), INPUTS[i].shape.end()));
        if (!data.empty()) std::memcpy(tensor.data(), data.data(), data.size());
        request.set_tensor(port, tensor);
    }
    request.infer();
    std::cout.precision(9);
    for (const auto& port : compiled.outputs()) print_ov(port.get_any_name(), request.get_tensor(port));"""

_OV_PRINT = """
static void print_ov(const std::string& name, const ov::Tensor& t) {
    const ov::Shape s = t.get_shape();
    print_output(name, std::vector<int64_t>(s.begin(), s.end()));
    const void* p = t.data();
    const size_t n = t.get_size();
    const ov::element::Type type = t.get_element_type();
    if (type == ov::element::f32) print_values<float>(p, n);
    else if (type == ov::element::f64) print_values<double>(p, n);
    else if (type == ov::element::i64) print_values<int64_t>(p, n);
    else if (type == ov::element::i32) print_values<int32_t>(p, n);
    else if (type == ov::element::i8) print_values<int8_t>(p, n);
    else if (type == ov::element::u8 || type == ov::element::boolean) print_values<uint8_t>(p, n);
    else std::cout << " (element type " << type << " not printed)";
    std::cout << std::endl;
}
"""


def _onnxruntime(runtime: dict, manifest: dict) -> str:
    s = runtime.get("settings") or {}
    lines = ["    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, \"edgeopt\");", "    Ort::SessionOptions so;",
             f"    so.SetGraphOptimizationLevel(GraphOptimizationLevel::"
             f"{s.get('graph_optimization_level') or 'ORT_ENABLE_ALL'});"]
    if s.get("threads"):
        lines.append(f"    so.SetIntraOpNumThreads({int(s['threads'])});")
    if s.get("allow_spinning") is False:
        lines.append("    so.AddConfigEntry(\"session.intra_op.allow_spinning\", \"0\");")
    provider = s.get("provider") or "CPUExecutionProvider"
    extra = [n for n in dict.fromkeys([provider, *(s.get("fallback_providers") or [])]) if n != "CPUExecutionProvider"]
    if extra:  # each where this ONNX Runtime has it (as load.py); the CPU takes what the providers before it leave
        lines += ["    const std::vector<std::string> available = Ort::GetAvailableProviders();",
                  "    auto has = [&](const char* name) {",
                  "        return std::find(available.begin(), available.end(), name) != available.end(); };",
                  "    bool accelerated = false;"]
    for name in extra:
        lines += _ort_provider(name, (s.get("provider_options") or {}) if name == provider else {})
    if extra and s.get("disabled_optimizers"):
        names = ";".join(s["disabled_optimizers"])
        lines += ["    if (accelerated)  // with a provider other than the CPU only, as edgeopt's runner",
                  f"        so.AddConfigEntry(\"optimization.disable_specified_optimizers\", {_q(names)});"]
    lines += [f"    Ort::Session session(env, (dir + \"/{runtime['model']}\").c_str(), so);", _ORT_RUN]
    types = ", ".join(f"ONNX_TENSOR_ELEMENT_DATA_TYPE_{DTYPES[str(t['dtype'])][1]}" for t in manifest["inputs"])
    return ("// Build: g++ -std=c++17 load.cc -I$ORT/include -L$ORT/lib -lonnxruntime\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <onnxruntime_cxx_api.h>\n#include <algorithm>\n" + INCLUDES + HELPERS + inputs_table(manifest)
            + f"static const std::vector<ONNXTensorElementDataType> INPUT_TYPES = {{{types}}};\n"
            + _ORT_PRINT + _MAIN % "\n".join(lines))


_ORT_RUN = """    Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    std::vector<std::vector<char>> data;
    std::vector<Ort::Value> values;
    std::vector<const char*> in_names;
    data.reserve(INPUTS.size());
    for (size_t i = 0; i < INPUTS.size(); ++i) {
        data.push_back(input_bytes(INPUTS[i], i, argc, argv));
        values.push_back(Ort::Value::CreateTensor(memory, data.back().data(), data.back().size(),
                                                  INPUTS[i].shape.data(), INPUTS[i].shape.size(), INPUT_TYPES[i]));
        in_names.push_back(INPUTS[i].name);
    }
    Ort::AllocatorWithDefaultOptions allocator;
    std::vector<Ort::AllocatedStringPtr> held;
    std::vector<const char*> out_names;
    for (size_t i = 0; i < session.GetOutputCount(); ++i) {
        held.push_back(session.GetOutputNameAllocated(i, allocator));
        out_names.push_back(held.back().get());
    }
    std::vector<Ort::Value> outputs = session.Run(Ort::RunOptions{nullptr}, in_names.data(), values.data(),
                                                  values.size(), out_names.data(), out_names.size());
    std::cout.precision(9);
    for (size_t i = 0; i < outputs.size(); ++i) print_ort(out_names[i], outputs[i]);"""

_ORT_PRINT = """
static void print_ort(const std::string& name, const Ort::Value& value) {
    auto info = value.GetTensorTypeAndShapeInfo();
    print_output(name, info.GetShape());
    const void* p = value.GetTensorRawData();
    const size_t n = info.GetElementCount();
    switch (info.GetElementType()) {
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: print_values<float>(p, n); break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: print_values<double>(p, n); break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: print_values<int64_t>(p, n); break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: print_values<int32_t>(p, n); break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: print_values<int8_t>(p, n); break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: print_values<uint8_t>(p, n); break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: print_values<bool>(p, n); break;
        default: std::cout << " (element type " << info.GetElementType() << " not printed)";
    }
    std::cout << std::endl;
}
"""


def _ort_value(value) -> str:
    text = str(value).replace("{work_dir}", "/path/to/work_dir")
    return {"True": "1", "False": "0"}.get(text, text)


def _ort_provider(name: str, options: dict) -> list[str]:
    """C++ lines appending provider ``name`` with ``options`` where this ONNX Runtime has it (TensorRT and CUDA
    through their V2 options)."""
    keys = ", ".join(_q(k) for k in options)
    values = ", ".join(_q(_ort_value(v)) for v in options.values())
    short = {"TensorrtExecutionProvider": "TensorRT", "CUDAExecutionProvider": "CUDA"}.get(name)
    if short is None:
        pairs = ", ".join(f"{{{_q(k)}, {_q(_ort_value(v))}}}" for k, v in options.items())
        return [f"    if (has({_q(name)})) {{",
                f"        so.AppendExecutionProvider({_q(name.replace('ExecutionProvider', ''))}, {{{pairs}}});",
                "        accelerated = true;", "    }"]
    return [f"    if (has({_q(name)})) {{  // an ONNX Runtime built with it (the board's); set /path/to/work_dir",
            "        const OrtApi& api = Ort::GetApi();",
            f"        Ort{short}ProviderOptionsV2* opts = nullptr;",
            f"        Ort::ThrowOnError(api.Create{short}ProviderOptions(&opts));",
            f"        std::vector<const char*> keys{{{keys}}}, values{{{values}}};",
            f"        Ort::ThrowOnError(api.Update{short}ProviderOptions(opts, keys.data(), values.data(), keys.size()));",
            f"        so.AppendExecutionProvider_{short}_V2(*opts);",
            f"        api.Release{short}ProviderOptions(opts);",
            "        accelerated = true;",
            "    }"]


def _tflite(runtime: dict) -> str:
    s = runtime.get("settings") or {}
    threads = int(s["threads"]) if s.get("threads") else -1
    body = (f"    auto model = tflite::FlatBufferModel::BuildFromFile((dir + \"/{runtime['model']}\").c_str());\n"
            "    tflite::ops::builtin::BuiltinOpResolver resolver;  // XNNPACK applies by default\n"
            "    tflite::InterpreterBuilder builder(*model, resolver);\n"
            f"    builder.SetNumThreads({threads});\n"
            "    std::unique_ptr<tflite::Interpreter> interpreter;\n"
            "    if (builder(&interpreter) != kTfLiteOk || interpreter->AllocateTensors() != kTfLiteOk) return 1;\n"
            f"    auto* runner = interpreter->GetSignatureRunner({_q(s.get('signature') or 'serving_default')});\n"
            "    // inputs are in the runtime's layout (see manifest.json runtime.io: transpose), int8 where quantized\n"
            "    (void)runner;")
    return ("// Build against LiteRT / TensorFlow Lite (tensorflow/lite), e.g. with its CMake project\n"
            "#include <memory>\n#include <string>\n#include \"tensorflow/lite/interpreter.h\"\n"
            "#include \"tensorflow/lite/kernels/register.h\"\n#include \"tensorflow/lite/model.h\"\n"
            + _MAIN % body)


def _tvm(runtime: dict, manifest: dict) -> str:
    s = runtime.get("settings") or {}
    threads = f"    setenv(\"TVM_NUM_THREADS\", \"{int(s['threads'])}\", 0);\n" if s.get("threads") else ""
    codes = ", ".join(f"{{{DTYPES[str(t['dtype'])][2]}, 1}}" for t in manifest["inputs"])
    outs = ", ".join(_q(io["name"]) for io in (runtime.get("io") or {}).get("outputs") or manifest["outputs"])
    body = (threads + "    setenv(\"TVM_BIND_THREADS\", \"0\", 0);  // as load.py: a 1-thread pool would pin the caller\n"
            f"    ffi::Module lib = ffi::Module::LoadFromFile(dir + \"/{runtime['model']}\");\n" + _TVM_RUN)
    return ("// Build: g++ -std=c++17 load.cc -I$TVM_FFI/include -L$TVM/lib -L$TVM_FFI/lib "
            "-ltvm_runtime -ltvm_ffi\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/extra/module.h>\n#include <tvm/ffi/function.h>\n"
            + INCLUDES + "#include <cstring>\nusing namespace tvm;\n" + HELPERS + inputs_table(manifest)
            + f"static const std::vector<DLDataType> INPUT_TYPES = {{{codes}}};\n"
            + f"static const std::vector<std::string> OUTPUT_NAMES = {{{outs}}};\n" + _TVM_PRINT + _MAIN % body)


_TVM_RUN = """    // the Relax VirtualMachine on the CPU (device type, id, pooled allocator), as tvm.runtime.vm does
    ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
    vm->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, 2);
    const DLDevice cpu{kDLCPU, 0};
    std::vector<ffi::AnyView> args;
    std::vector<ffi::Tensor> tensors;
    for (size_t i = 0; i < INPUTS.size(); ++i) {
        std::vector<char> data = input_bytes(INPUTS[i], i, argc, argv);
        tensors.push_back(ffi::Tensor::FromNDAlloc(AlignedCPU(), ffi::Shape(INPUTS[i].shape), INPUT_TYPES[i], cpu));
        if (!data.empty()) std::memcpy(tensors.back().data_ptr(), data.data(), data.size());
    }
    for (const auto& t : tensors) args.push_back(t);
    ffi::Any result;
    vm->GetFunction("main").value().CallPacked(args.data(), static_cast<int32_t>(args.size()), &result);
    std::cout.precision(9);
    if (auto one = result.as<ffi::Tensor>()) {
        print_tvm(OUTPUT_NAMES.at(0), *one);
    } else {
        auto many = result.cast<ffi::Array<ffi::Tensor>>();
        for (size_t i = 0; i < many.size(); ++i) print_tvm(OUTPUT_NAMES.at(i), many[i]);
    }"""

_TVM_PRINT = """
struct AlignedCPU {  // TVM's kernels expect 64-byte aligned buffers
    void AllocData(DLTensor* t) { t->data = std::aligned_alloc(64, (ffi::GetDataSize(*t) + 63) / 64 * 64 + 64); }
    void FreeData(DLTensor* t) { std::free(t->data); }
};

static void print_tvm(const std::string& name, const ffi::Tensor& t) {
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    print_output(name, shape);
    const size_t n = element_count(shape);
    const void* p = t.data_ptr();
    const int code = t.dtype().code, bits = t.dtype().bits;
    if (code == kDLFloat && bits == 32) print_values<float>(p, n);
    else if (code == kDLFloat && bits == 64) print_values<double>(p, n);
    else if (code == kDLInt && bits == 64) print_values<int64_t>(p, n);
    else if (code == kDLInt && bits == 32) print_values<int32_t>(p, n);
    else if (code == kDLInt && bits == 8) print_values<int8_t>(p, n);
    else if ((code == kDLUInt || code == kDLBool) && bits == 8) print_values<uint8_t>(p, n);
    else std::cout << " (dtype " << code << ":" << bits << " not printed)";
    std::cout << std::endl;
}
"""


def cc_source(manifest: dict) -> str:
    runtime = manifest["runtime"]
    backend = runtime["backend"]
    if backend != "tflite":  # these run the model on input files and print its outputs
        return _head(manifest) + {"onnxruntime": _onnxruntime, "tvm": _tvm, "openvino": _openvino}[backend](
            runtime, manifest)
    make = {"tflite": _tflite}[backend]
    return _head(manifest) + make(runtime)


def _head(manifest: dict) -> str:
    runtime = manifest["runtime"]
    return (f"// Load {runtime['model']} with the settings edgeopt judged it at ({runtime['backend']}, "
            f"{manifest.get('precision')}, profile {manifest.get('profile')}); generated from manifest.json.\n")
