"""TVM's part of the files written beside an artifact for its consumer: ``load.py``'s runtime part
(``load_template.py`` beside this file), ``load.cc`` (the library run in the Relax VirtualMachine through tvm-ffi),
what TVM's plain API honours, and whether a library built for another machine loads here."""

from __future__ import annotations

from edgeopt.consumer.cc_io import DTYPES, HELPERS, INCLUDES, MAIN, inputs_table, quoted

# setting -> (whether the plain API applies it from the library alone, how load.py/load.cc apply it)
PLAIN_API: dict[str, tuple[bool, str]] = {
    "target": (True, "compiled into the library"),
    "arch": (True, "compiled into the library"),
    "tuning": (True, "the tuned schedules are compiled into the library"),
    "versions": (True, "informative"),
    "device": (False, "the device given to the VirtualMachine (tvm.cpu(0))"),
    "threads": (False, "TVM_NUM_THREADS in the environment"),
}


def load_cc(runtime: dict, manifest: dict) -> str:
    s = runtime.get("settings") or {}
    threads = f"    setenv(\"TVM_NUM_THREADS\", \"{int(s['threads'])}\", 0);\n" if s.get("threads") else ""
    codes = ", ".join(f"{{{DTYPES[str(t['dtype'])][2]}, 1}}" for t in manifest["inputs"])
    outs = ", ".join(quoted(io["name"]) for io in (runtime.get("io") or {}).get("outputs") or manifest["outputs"])
    body = (threads + "    setenv(\"TVM_BIND_THREADS\", \"0\", 0);  // as load.py: a 1-thread pool would pin the caller\n"
            f"    ffi::Module lib = ffi::Module::LoadFromFile(dir + \"/{runtime['model']}\");\n" + _TVM_RUN)
    return ("// Build: g++ -std=c++17 load.cc -I$TVM_FFI/include -L$TVM/lib -L$TVM_FFI/lib "
            "-ltvm_runtime -ltvm_ffi\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/extra/module.h>\n#include <tvm/ffi/function.h>\n"
            + INCLUDES + "#include <cstring>\nusing namespace tvm;\n" + HELPERS + inputs_table(manifest)
            + f"static const std::vector<DLDataType> INPUT_TYPES = {{{codes}}};\n"
            + f"static const std::vector<std::string> OUTPUT_NAMES = {{{outs}}};\n" + _TVM_PRINT + MAIN % body)


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


def not_loadable_here(manifest: dict) -> str | None:
    """Why the artifact's own file can't be loaded on this machine (a TVM library built for a board), or None; an
    aarch64 CPU library also runs on the emulated board, which holds the TVM runtime."""
    from edgeopt.runtime.runners.tvm import machine_arch

    runtime = manifest["runtime"]
    arch = (runtime.get("settings") or {}).get("arch")
    if arch and arch != machine_arch():
        emulated = (f"; an emulated one: edgeopt emulate start {manifest.get('profile') or 'PROFILE'}"
                    if arch == "aarch64" and (runtime.get("settings") or {}).get("device", "cpu") == "cpu" else "")
        return f"{runtime['model']} is built for {arch}: load.py runs on the device (--verify-on DEVICE{emulated})"
    return None
