"""Enumerations shared across edgeopt (never magic strings)."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    def __str__(self) -> str:  # prints as its value in tables and JSON
        return self.value


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"


class UnitKind(StrEnum):
    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"


class BackendName(StrEnum):
    ONNXRUNTIME = "onnxruntime"
    OPENVINO = "openvino"
    TFLITE = "tflite"
    TVM = "tvm"


class SourceKind(StrEnum):
    DATASHEET = "datasheet"  # a number printed by the vendor
    DERIVED = "derived"  # computed from datasheet numbers (formula given in the note)
    MEASURED = "measured"  # measured on the device (how, in the note)
    ESTIMATE = "estimate"  # an informed estimate, labelled as such everywhere


class RunLocation(StrEnum):
    LOCAL = "local"
    EMULATED = "emulated"
    REMOTE = "remote"
