"""ONNX Runtime's part of the files written beside an artifact for its consumer: ``load.py``'s runtime part
(``load_template.py`` beside this file), ``load.cc`` (the session made with the judged options and providers
through the C++ API) and what ONNX Runtime's plain API honours."""

from __future__ import annotations

from edgeopt.consumer.cc_io import DTYPES, HELPERS, INCLUDES, MAIN, inputs_table, quoted

# setting -> (whether the plain API applies it from the .onnx file alone, how load.py/load.cc apply it)
PLAIN_API: dict[str, tuple[bool, str]] = {
    "graph_optimization_level": (False, "SessionOptions.graph_optimization_level (the default is ORT_ENABLE_ALL)"),
    "threads": (False, "SessionOptions.intra_op_num_threads"),
    "provider": (False, "InferenceSession(providers=...)"),
    "fallback_providers": (False, "InferenceSession(providers=...)"),
    "provider_options": (False, "InferenceSession(providers=[(name, options)])"),
    "disabled_optimizers": (False, "InferenceSession(disabled_optimizers=...); C/C++: the session config entry "
                                   "optimization.disable_specified_optimizers"),
    "allow_spinning": (False, "session config entry session.intra_op.allow_spinning"),
}


def load_cc(runtime: dict, manifest: dict) -> str:
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
                  f"        so.AddConfigEntry(\"optimization.disable_specified_optimizers\", {quoted(names)});"]
    lines += [f"    Ort::Session session(env, (dir + \"/{runtime['model']}\").c_str(), so);", _ORT_RUN]
    types = ", ".join(f"ONNX_TENSOR_ELEMENT_DATA_TYPE_{DTYPES[str(t['dtype'])][1]}" for t in manifest["inputs"])
    return ("// Build: g++ -std=c++17 load.cc -I$ORT/include -L$ORT/lib -lonnxruntime\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <onnxruntime_cxx_api.h>\n#include <algorithm>\n" + INCLUDES + HELPERS + inputs_table(manifest)
            + f"static const std::vector<ONNXTensorElementDataType> INPUT_TYPES = {{{types}}};\n"
            + _ORT_PRINT + MAIN % "\n".join(lines))


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
    keys = ", ".join(quoted(k) for k in options)
    values = ", ".join(quoted(_ort_value(v)) for v in options.values())
    short = {"TensorrtExecutionProvider": "TensorRT", "CUDAExecutionProvider": "CUDA"}.get(name)
    if short is None:
        pairs = ", ".join(f"{{{quoted(k)}, {quoted(_ort_value(v))}}}" for k, v in options.items())
        return [f"    if (has({quoted(name)})) {{",
                f"        so.AppendExecutionProvider({quoted(name.replace('ExecutionProvider', ''))}, {{{pairs}}});",
                "        accelerated = true;", "    }"]
    return [f"    if (has({quoted(name)})) {{  // an ONNX Runtime built with it (the board's); set /path/to/work_dir",
            "        const OrtApi& api = Ort::GetApi();",
            f"        Ort{short}ProviderOptionsV2* opts = nullptr;",
            f"        Ort::ThrowOnError(api.Create{short}ProviderOptions(&opts));",
            f"        std::vector<const char*> keys{{{keys}}}, values{{{values}}};",
            f"        Ort::ThrowOnError(api.Update{short}ProviderOptions(opts, keys.data(), values.data(), keys.size()));",
            f"        so.AppendExecutionProvider_{short}_V2(*opts);",
            f"        api.Release{short}ProviderOptions(opts);",
            "        accelerated = true;",
            "    }"]
