"""The kinds of 8-bit quantization, as typed configs, and the one quantizer interface each backend implements.

A *mode* says what is quantized and how; it is not a precision (``Precision.INT8`` stays the one precision
for all of them, as in Hugging Face Optimum where weight-only quantization is its own config type):

- :class:`StaticMode`: weights and activations in INT8, activation ranges calibrated on the user's data
  (the right choice for convolutional graphs);
- :class:`DynamicMode`: INT8 weights, activations quantized at run time per call (MatMul/LSTM-heavy graphs);
- :class:`WeightsMode`: weight-only INT8, activations stay float (weight-bound models, any backend).

Each backend's quantizer (``converters/backends/<backend>/quantizer.py``; ONNX Runtime's, which the Q/DQ stage
shared with TVM uses, is ``converters/quantize/qdq_quantizer.py``) subclasses :class:`Quantizer`, says
which modes it supports, and quantizes one model file with one mode, keeping the ops it is told to keep in
float. The accuracy-aware search runs over modes, then each mode's options, then per-op float fallback.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.enums import QuantMode, StrEnum

__all__ = ["QuantMode", "Granularity", "StaticMode", "DynamicMode", "WeightsMode", "ModeConfig", "MODE_TYPES",
           "QuantizedModel", "Quantizer"]


class Granularity(StrEnum):
    PER_CHANNEL = "per-channel"
    PER_TENSOR = "per-tensor"


class _ModeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    granularity: Granularity = Granularity.PER_CHANNEL  # of the weights
    bits: Literal[8] = 8  # of the weights; other widths are a field value, not a new precision

    def label(self) -> str:
        return f"{self.kind.value} {self.granularity.value}"  # type: ignore[attr-defined]


class StaticMode(_ModeConfig):
    what: ClassVar[str] = "static"  # its name in messages
    kind: Literal[QuantMode.STATIC] = QuantMode.STATIC
    symmetric_activations: bool = False  # TensorRT-style S8 activations with zero point 0 when True


class DynamicMode(_ModeConfig):
    what: ClassVar[str] = "dynamic"  # its name in messages
    kind: Literal[QuantMode.DYNAMIC] = QuantMode.DYNAMIC


class WeightsMode(_ModeConfig):
    what: ClassVar[str] = "weight-only"  # its name in messages
    kind: Literal[QuantMode.WEIGHTS] = QuantMode.WEIGHTS


ModeConfig = Annotated[StaticMode | DynamicMode | WeightsMode, Field(discriminator="kind")]

MODE_TYPES: dict[QuantMode, type[_ModeConfig]] = {
    QuantMode.STATIC: StaticMode,
    QuantMode.DYNAMIC: DynamicMode,
    QuantMode.WEIGHTS: WeightsMode,
}


@dataclass
class QuantizedModel:
    """What one quantizer call wrote: the file, and how much of the model is quantized (units are the
    backend's own: ONNX nodes, OpenVINO layers, TFLite ops), so an artifact called int8 can prove it."""

    path: Path
    mode: Any  # the ModeConfig used
    quantized_units: int
    float_units: int
    kept_float: tuple[str, ...] = ()  # the ops asked to stay float
    notes: dict[str, Any] = field(default_factory=dict)


BOTH_GRAINS = (Granularity.PER_CHANNEL, Granularity.PER_TENSOR)


class Quantizer(ABC):
    """One backend's 8-bit quantizer. A ``Backend`` names its quantizer class (``quantizer`` descriptor).

    ``modes`` is the one declaration of what it offers: the kinds, in the order a mode search builds them; the
    searches read their candidates from it (:meth:`search_modes`), so a kind added here is one they try.
    ``granularities`` narrows the weight granularities a search tries for a kind (default: per-channel, then
    per-tensor)."""

    modes: ClassVar[tuple[QuantMode, ...]] = ()  # what this backend can do (never AUTO), in search order
    granularities: ClassVar[dict[QuantMode, tuple[Granularity, ...]]] = {}

    @classmethod
    def supports(cls, mode: QuantMode) -> bool:
        return mode in cls.modes

    @classmethod
    def search_modes(cls, quant_mode: QuantMode) -> list[StaticMode | DynamicMode | WeightsMode]:
        """The mode configs a search builds: every kind in ``modes`` with ``--quant-mode auto``, else only the
        ``quant_mode`` kind (none when this quantizer does not offer it), each at its granularities."""
        kinds = [k for k in cls.modes if quant_mode == QuantMode.AUTO or k == quant_mode]
        return [MODE_TYPES[k](granularity=g) for k in kinds for g in cls.granularities.get(k, BOTH_GRAINS)]

    @abstractmethod
    def quantize(self, model: Path, mode: StaticMode | DynamicMode | WeightsMode, out: Path, *,
                 calib: Any = None, keep_float: tuple[str, ...] = ()) -> QuantizedModel:
        """Quantize ``model`` (the backend's float format) with ``mode`` into ``out``; ``calib`` is an
        ``edgeopt.data.Dataset`` (static mode needs it); ops named in ``keep_float`` stay float."""
