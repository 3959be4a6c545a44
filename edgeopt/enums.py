"""Enumerations shared across edgeopt (never magic strings)."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    def __str__(self) -> str:  # prints as its value in tables and JSON
        return self.value


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"  # a float artifact the runtime runs in bf16 (OpenVINO on AMX/AVX512-BF16 CPUs): said, never fp32
    INT8 = "int8"


class QuantMode(StrEnum):
    """The kind of 8-bit quantization (``--quant-mode``): what is quantized, not a precision
    (``converters/quantize/modes.py`` has the typed configs)."""

    AUTO = "auto"  # the search picks among the modes that fit the graph
    STATIC = "static"
    DYNAMIC = "dynamic"
    WEIGHTS = "weights"


class Format(StrEnum):
    """The file format of a chain intermediate or of an artifact's model (a stage's ``accepts``/``produces``)."""

    ONNX = "onnx"
    OPENVINO_IR = "openvino-ir"
    TFLITE = "tflite"
    TVM_LIB = "tvm-lib"


class UnitKind(StrEnum):
    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"


class BackendName(StrEnum):
    """The built-in backends; a backend registered at run time (``registry.register_backend``) becomes a
    member too, so plans, configs and manifests treat it like these."""

    ONNXRUNTIME = "onnxruntime"
    OPENVINO = "openvino"
    TFLITE = "tflite"
    TVM = "tvm"

    @classmethod
    def register(cls, name: str) -> BackendName:
        """Make ``name`` a member (a backend defined outside edgeopt; see ``registry.register_backend``)."""
        _REGISTERED_BACKENDS.add(name)
        return cls(name)

    @classmethod
    def unregister(cls, name: str) -> None:
        if name in _REGISTERED_BACKENDS:
            _REGISTERED_BACKENDS.discard(name)
            cls._value2member_map_.pop(name, None)

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str) and value in _REGISTERED_BACKENDS:
            member = str.__new__(cls, value)
            member._name_, member._value_ = value.upper().replace("-", "_"), value
            return cls._value2member_map_.setdefault(value, member)
        return None


_REGISTERED_BACKENDS: set[str] = set()  # filled by edgeopt.converters.registry.register_backend


class SourceKind(StrEnum):
    DATASHEET = "datasheet"  # a number printed by the vendor
    DERIVED = "derived"  # computed from datasheet numbers (formula given in the note)
    MEASURED = "measured"  # measured on the device (how, in the note)
    ESTIMATE = "estimate"  # an informed estimate, labelled as such everywhere


class RunLocation(StrEnum):
    LOCAL = "local"
    EMULATED = "emulated"
    REMOTE = "remote"


class EarlyExitMode(StrEnum):
    """``--early-exit``: add early exits to a classifier (``converters/early_exit/``)."""

    OFF = "off"
    AUTO = "auto"


class CutCost(StrEnum):
    """What places the early-exit cuts (``early_exit.cuts_by``): each candidate prefix timed as the profile's
    backend runs it at the run's precision (estimated by the FLOP/byte cost model where it can't be timed here), or
    by the reference runtime on the model as the chain hands it on."""

    BY_BACKEND = "backend"
    BY_REFERENCE = "reference"


class ClaimSource(StrEnum):
    """Which speed-up ``convert`` claimed, checked on the written artifact (``edgeopt/speed_claim.py``)."""

    INT8_VERDICT = "int8_verdict"  # the INT8 search's speed verdict: the artifact vs FP32 in its runtime
    BACKEND_AUTO = "backend_auto"  # --backend auto's pick: the artifact vs ONNX Runtime FP32
