"""OpenVINO's part of the files written beside an artifact for its consumer: ``load.py``'s runtime part
(``load_template.py`` beside this file), ``load.cc`` (the IR compiled with the judged config through ``ov::Core``;
it prints the precision it compiled at), what OpenVINO's plain API honours, and where its CPU's plain default
precision differs from the judged one."""

from __future__ import annotations

from edgeopt.consumer.cc_io import HELPERS, INCLUDES, MAIN, inputs_table, quoted
from edgeopt.converters.hooks import PlainDefault

# setting -> (whether the plain API applies it from the IR alone, how load.py/load.cc apply it)
PLAIN_API: dict[str, tuple[bool, str]] = {
    "inference_precision": (False, "compile_model(..., INFERENCE_PRECISION_HINT); the IR's rt_info "
                                   "runtime_options are not applied for it (checked on OpenVINO 2026.4.1)"),
    "performance_hint": (False, "compile_model(..., PERFORMANCE_HINT)"),
    "threads": (False, "compile_model(..., INFERENCE_NUM_THREADS, NUM_STREAMS=1)"),
    "device": (False, "the device named to compile_model"),
}


_OV_TYPES = {"f32": "f32", "bf16": "bf16", "f16": "f16", "i8": "i8"}


def load_cc(runtime: dict, manifest: dict) -> str:
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
            f"{quoted(s.get('device') or 'CPU')},\n        {args});\n"
            "    std::cout << \"INFERENCE_PRECISION_HINT \" << compiled.get_property(ov::hint::inference_precision)"
            " << std::endl;\n"
            + _OV_RUN)
    return ("// Build: g++ -std=c++17 load.cc -I$OPENVINO/runtime/include -L$OPENVINO/runtime/lib/intel64 -lopenvino\n"
            "// Run: ./load MODEL_DIR [INPUT.bin ...] (one raw C-order file per input, ONNX layout; zeros without)\n"
            "#include <openvino/openvino.hpp>\n#include <cstring>\n" + INCLUDES + HELPERS + inputs_table(manifest)
            + _OV_PRINT + MAIN % body)


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


# OpenVINO's CPU runs bf16 by default on CPUs with AVX512-BF16 or AMX; edgeopt judges at the hint its settings name,
# f32 unless asked
SETTING = "inference_precision"
BF16_ISA = ("avx512_bf16", "amx_bf16")


def differing_default(manifest: dict, bare: dict) -> tuple[str, str] | None:
    """(the judged precision hint, the plain default this machine ran) for a CPU artifact where they differ."""
    settings = manifest["runtime"].get("settings") or {}
    if (settings.get("device") or "CPU") != "CPU":  # another device's plain default is that device's
        return None
    judged = settings.get(SETTING) or "f32"
    ran = bare.get("INFERENCE_PRECISION_HINT")
    return (judged, ran) if ran and ran != judged else None


def target_runs_bf16(profile) -> bool:
    """Whether the profile's CPU lists bf16 instructions (its OpenVINO default is then bf16)."""
    from edgeopt.enums import UnitKind

    cpu = profile.unit(UnitKind.CPU) if profile is not None else None
    return bool(cpu and any(f in cpu.isa for f in BF16_ISA))


def unjudged_bf16_target(manifest: dict, bare: dict, profile) -> bool:
    """A CPU artifact judged at another hint for a profile whose CPU runs bf16 by default, checked on a machine
    whose own default is not bf16 (so the bf16 run could not be judged here)."""
    settings = manifest["runtime"].get("settings") or {}
    return ((settings.get("device") or "CPU") == "CPU" and (settings.get(SETTING) or "f32") != "bf16"
            and target_runs_bf16(profile) and bare.get("INFERENCE_PRECISION_HINT") != "bf16")


def unjudged_line(profile_name: str) -> str:
    return (f"openvino: {profile_name}'s CPU runs OpenVINO at bf16 by default, which this machine does not: the "
            "artifact was not judged at bf16; load it with load.py or load.cc (they set the judged "
            f"{SETTING})")


def loud_line(judged: str, ran: str, model: str) -> str:
    return (f"openvino: a plain compile_model('{model}', 'CPU') runs this artifact at {ran} on this CPU, not at the "
            f"{judged} it was judged at: load it with load.py or load.cc (they set {SETTING}={judged})")


def plain_default(manifest: dict, bare: dict, profile) -> PlainDefault | None:
    """The precision hint a plain ``compile_model`` runs at where it is not the judged one (run here), or where the
    profile's CPU runs bf16 by default and this machine does not (only said)."""
    differs = differing_default(manifest, bare)
    if differs is not None:
        return PlainDefault(loud_line(*differs, manifest["runtime"]["model"]), SETTING, *differs)
    if unjudged_bf16_target(manifest, bare, profile):
        return PlainDefault(unjudged_line(profile.name))
    return None
