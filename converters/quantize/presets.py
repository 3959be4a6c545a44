"""Hardware-named INT8 presets (Optimum style), each a frozen config chosen from the profile's ISA.

The numbers behind the choices (seen on this machine, see pitfalls.md): QDQ format with
activations QUInt8, weights QInt8 and per-channel weights lets every Conv fuse to QLinearConv
in ONNX Runtime's CPU provider; S8 activations left 12 of 27 convs in FP32 and ran slower than FP32.
On x86 without VNNI the u8*s8 multiply (vpmaddubsw) can saturate, so ``reduce_range`` (7-bit
weights) is the documented remedy there. TensorRT reads explicit QDQ only as symmetric signed INT8 (zero point 0)
for activations and weights, per-tensor activations and per-channel weights: the ``tensorrt`` preset, chosen for a
backend whose provider is ONNX Runtime's TensorRT execution provider (the Jetson profiles), whatever the board's CPU.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from edgeopt.converters.base import CalibMethod
from edgeopt.enums import StrEnum, UnitKind
from edgeopt.errors import UsageError, did_you_mean

TENSORRT = "tensorrt"  # the preset for ONNX Runtime's TensorRT execution provider (the search adds to it)
TRT_PROVIDER = "TensorrtExecutionProvider"  # ONNX Runtime's TensorRT execution provider, which reads the tensorrt preset


class QType(StrEnum):
    QUINT8 = "quint8"
    QINT8 = "qint8"


class QuantizerOptions(BaseModel):
    """The quantizer options a hardware preset decides (shared by presets and full settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    activation_type: QType = QType.QUINT8
    weight_type: QType = QType.QINT8
    per_channel: bool = True
    reduce_range: bool = False
    calib_method: CalibMethod = CalibMethod.MINMAX
    activation_symmetric: bool = False
    weight_symmetric: bool = True
    quantize_bias: bool = True  # False: biases stay float (TensorRT's DequantizeLinear takes no int32 bias)


class HardwarePreset(QuantizerOptions):
    name: str
    description: str


PRESETS: dict[str, HardwarePreset] = {
    p.name: p
    for p in (
        HardwarePreset(
            name="x86-vnni",
            description="x86 with AVX512-VNNI / AVX-VNNI / AMX: U8 activations, S8 per-channel weights, QDQ",
        ),
        HardwarePreset(
            name="x86-avx2",
            description="x86 AVX2 without VNNI: U8/S8 with reduce_range (7-bit weights) to avoid vpmaddubsw saturation",
            reduce_range=True,
        ),
        HardwarePreset(
            name="arm64-dotprod",
            description="Arm64 with the dot-product extension (asimddp, e.g. Cortex-A76/A78): U8 activations, S8 per-channel weights",
        ),
        HardwarePreset(
            name="arm64",
            description="Arm64 without dot-product: U8 activations, S8 per-channel weights",
        ),
        HardwarePreset(
            name=TENSORRT,
            description="TensorRT explicit quantization: symmetric S8 activations (zero point 0) and S8 per-channel "
                        "weights, QDQ; biases float (TensorRT's parser rejects an int32 bias DequantizeLinear)",
            activation_type=QType.QINT8,
            activation_symmetric=True,
            weight_symmetric=True,
            per_channel=True,
            quantize_bias=False,
        ),
    )
}


def get_preset(name: str) -> HardwarePreset:
    if name not in PRESETS:
        raise UsageError(f"unknown quantization preset '{name}'", did_you_mean(name, PRESETS) or f"presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_for_profile(profile, provider: str | None = None) -> tuple[HardwarePreset, str]:
    """The preset for the engine that runs the model (``provider``: the backend's execution provider, TensorRT's
    gets ``tensorrt``), else for the profile's CPU ISA; and why (a sentence for the report)."""
    if provider == TRT_PROVIDER:
        where = f"profile {profile.name}" if profile is not None else "the backend"
        return PRESETS[TENSORRT], (f"{where}: ONNX Runtime's TensorRT execution provider runs it, and TensorRT reads "
                                     "QDQ as symmetric signed INT8 (zero point 0) with per-channel weights")
    if profile is None:  # no target named: quantize for the machine that runs it
        from edgeopt.profiles import load_profile

        preset, why = preset_for_profile(load_profile("host"))
        return preset, f"no profile given: this machine's ({why})"
    arch = getattr(profile, "arch", "")
    cpu = profile.unit(UnitKind.CPU) if hasattr(profile, "unit") else None
    isa = set(cpu.isa) if cpu is not None else set()
    if arch in ("aarch64", "arm64"):
        if isa & {"asimddp", "dotprod", "i8mm"}:
            return PRESETS["arm64-dotprod"], f"profile {profile.name}: aarch64 with dot-product ({sorted(isa & {'asimddp', 'dotprod', 'i8mm'})})"
        return PRESETS["arm64"], f"profile {profile.name}: aarch64 without dot-product in its ISA list"
    vnni = isa & {"avx512_vnni", "avx_vnni", "amx_int8"}
    if vnni:
        return PRESETS["x86-vnni"], f"profile {profile.name}: x86 with {sorted(vnni)}"
    if "avx2" in isa:
        return PRESETS["x86-avx2"], f"profile {profile.name}: x86 AVX2 without VNNI (reduce_range)"
    return PRESETS["x86-vnni"], f"profile {profile.name}: ISA unknown ({sorted(isa)}); x86-vnni settings used"
