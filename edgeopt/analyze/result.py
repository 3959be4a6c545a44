"""Typed results of ``edgeopt analyze`` (pydantic; ``model_dump(mode="json")`` is the ``--json`` form).

Every latency here is an **estimate** from a roofline model, never a measurement:
``AnalysisResult.estimate`` is always ``True`` and every table title says "estimate".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.enums import BackendName, Precision, StrEnum, UnitKind


class Bound(StrEnum):
    MEMORY = "memory"
    COMPUTE = "compute"
    NONE = "none"  # no work (a reshape, a shape op)


class CostModel(StrEnum):
    EXACT = "exact"  # FLOPs from the op's definition (2 x MACs, elementwise counts)
    APPROX = "approx"  # a documented per-element weight (transcendentals, resize, norms)
    DATA_MOVEMENT = "data_movement"  # no arithmetic (transpose, concat, gather, ...)
    VIEW = "view"  # no arithmetic and no copy in any runtime (reshape, squeeze, shape, ...)
    FOLDED = "folded"  # every input is a constant: runtimes compute it once at load time
    UNKNOWN = "unknown"  # op type without a formula: counted as one op per output element


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class PreflightKind(StrEnum):
    UNSUPPORTED_OP = "unsupported_op"
    LOAD_FAILED = "load_failed"
    NOT_CHECKABLE = "not_checkable"
    NOT_INSTALLED = "not_installed"
    DYNAMIC_SHAPE = "dynamic_shape"
    WEIGHTS = "weights"  # NaN, or ±inf inside a weight (error); ±inf masks/reduction identities (info)
    OK = "ok"


class RecommendationKind(StrEnum):
    QUANTIZE_INT8 = "quantize_int8"
    FOLD_BATCHNORM = "fold_batchnorm"
    DEPTHWISE_DOMINATES = "depthwise_dominates"
    LARGE_FC = "large_fc"
    RECURRENT = "recurrent"
    TOO_LARGE_FOR_MEMORY = "too_large_for_memory"
    OVERHEAD_BOUND = "overhead_bound"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpCost(_Result):
    name: str
    op_type: str
    flops: int = Field(ge=0, description="floating-point (or integer) operations; a MAC counts as 2")
    macs: int = Field(ge=0)
    param_bytes: int = Field(ge=0, description="initializer / Constant bytes the op reads")
    act_read_bytes: int = Field(ge=0)
    act_write_bytes: int = Field(ge=0)
    bytes_fp32: int = Field(ge=0, description="params + activations read + written, as stored")
    bytes_fp16: int = Field(ge=0, description="the same with every float tensor at 2 bytes an element")
    bytes_int8: int = Field(ge=0, description="the same with every float tensor at 1 byte an element")
    intensity: float = Field(ge=0, description="FLOPs per byte (fp32 bytes)")
    output_shapes: list[list[int]] = Field(default_factory=list)
    cost_model: CostModel
    depthwise: bool = False
    time_us: float = Field(0.0, ge=0, description="roofline time on the primary unit at FP32 (estimate)")
    bound: Bound = Bound.NONE


class UnitPrediction(_Result):
    unit: UnitKind
    unit_name: str
    precision: Precision
    peak_gops: float
    bandwidth_gbps: float
    ridge_flops_per_byte: float = Field(description="intensity above which an op is compute-bound")
    roofline_ms: float = Field(description="pure roofline: sum over ops of max(FLOPs/peak, bytes/bandwidth)")
    compute_ms: float = Field(description="sum of FLOPs/peak alone")
    memory_ms: float = Field(description="sum of bytes/bandwidth alone")
    memory_bound_share: float = Field(ge=0, le=1, description="share of roofline time spent in memory-bound ops")
    efficiency: float = Field(gt=0, le=1)
    overhead_ms: float = Field(ge=0, description="op-count x per-op dispatch overhead (estimate)")
    estimate_ms: float = Field(description="roofline_ms / efficiency + overhead_ms")
    estimate: Literal[True] = True


class Recommendation(_Result):
    kind: RecommendationKind
    title: str
    detail: str
    expected_gain: str = Field(description="the expected gain in words, from the model's own numbers")
    speedup: float | None = Field(None, description="predicted latency before / after (estimate)")
    bytes_saved: int | None = None
    flops_saved: int | None = None
    ops_affected: int = 0
    ops: list[str] = Field(default_factory=list, description="names of the ops concerned (first 20)")


class PreflightIssue(_Result):
    backend: BackendName | None = None
    unit: UnitKind | None = None
    severity: Severity
    kind: PreflightKind
    message: str
    ops: list[str] = Field(default_factory=list, description="op types concerned")


class OpTypeShare(_Result):
    op_type: str
    count: int
    flops: int
    bytes_fp32: int
    time_us: float
    time_share: float


class TensorInfo(_Result):
    name: str
    shape: list[int | str | None]
    dtype: str


class Totals(_Result):
    nodes: int
    flops: int
    macs: int
    params: int = Field(description="elements in initializers / Constants")
    param_bytes: int
    activation_bytes: int = Field(description="bytes of every intermediate tensor, each written once")
    peak_activation_bytes: int = Field(description="largest single op's inputs + outputs (a lower bound)")
    bytes_fp32: int = Field(description="sum of per-op traffic (params + reads + writes)")
    bytes_int8: int
    intensity: float
    model_file_bytes: int | None = None
    memory_bytes: int = Field(description="the device's memory")
    memory_share: float = Field(description="(params + peak activations) / device memory")


class AnalysisResult(_Result):
    estimate: Literal[True] = True
    model: str
    profile: str
    profile_detected: bool
    primary_unit: UnitKind
    shape_source: str = Field(description="how intermediate shapes were found")
    inputs: list[TensorInfo]
    totals: Totals
    predictions: list[UnitPrediction]
    memory_bound_share: float = Field(description="on the primary unit at FP32")
    op_types: list[OpTypeShare]
    heaviest: list[OpCost]
    ops: list[OpCost]
    recommendations: list[Recommendation]
    preflight: list[PreflightIssue]
    notes: list[str] = Field(default_factory=list)

    def prediction(self, unit: UnitKind, precision: Precision) -> UnitPrediction | None:
        return next((p for p in self.predictions if p.unit == unit and p.precision == precision), None)
