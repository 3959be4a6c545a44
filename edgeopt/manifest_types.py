"""The typed entries of a manifest: the runtime entry, the stage records, the plan, ``--backend auto``'s rows and
``--verify-on``'s record (:class:`edgeopt.artifact.Manifest`'s fields).

Each entry writes exactly the keys it was given, in the order it was given them (:class:`Entry`): a manifest read
from disk is written back byte for byte, and a backend that adds a key of its own order keeps it. What a backend or
a stage fills freely (a runtime's settings, a stage's config, checks and report) is a mapping of names to JSON
values (:data:`JsonDict`), never an arbitrary object. ``edgeopt/runtime/`` (shipped to devices) reads the same
entries from ``manifest.json`` as plain dicts.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    JsonValue,
    PrivateAttr,
    model_serializer,
    model_validator,
)
from pydantic_core import to_jsonable_python

from edgeopt.converters.registry import REFERENCE

# a JSON object: what a converter fills freely (tuples become lists, paths strings, as in the written JSON)
JsonDict = Annotated[dict[str, JsonValue], BeforeValidator(to_jsonable_python)]
# a figure as measured: an int stays an int; a non-finite one is the string the strict JSON writer made of it ("inf")
Figure = int | float | str


class Entry(BaseModel):
    """A frozen manifest entry that dumps the keys it was given (and only those), in the order given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    _order: tuple[str, ...] = PrivateAttr(default=())
    # an old key -> the field it is read into, in place (manifests written before the field was renamed)
    renamed: ClassVar[dict[str, str]] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data, handler):
        if isinstance(data, dict) and cls.renamed:
            data = {cls.renamed.get(k, k): v for k, v in data.items()}
        entry = handler(data)
        if isinstance(data, dict):
            entry._order = tuple(data)
        return entry

    @model_serializer(mode="wrap")
    def _as_given(self, handler):
        out = handler(self)
        keys = [k for k in self._order if k in out] + [k for k in out if k not in self._order]
        return {k: out[k] for k in keys if k in self.model_fields_set}


class TensorMap(Entry):
    """One model input or output: its name in the source ONNX, its name in the runtime, the transpose between."""

    name: str
    runtime_name: str
    transpose: list[int] | None = None


class RuntimeIO(Entry):
    inputs: list[TensorMap] | None = None
    outputs: list[TensorMap] | None = None


class HostTwin(Entry):
    """A cross-compiled TVM library's twin built for the converting host (validated here in its place)."""

    model: str
    arch: str
    target: JsonDict


class FloatLayers(Entry):
    """Linear layers of a TensorRT-shaped ONNX Runtime artifact left in float."""

    precision: str
    count: int
    nodes: list[str]


class EngineBuild(Entry):
    """Where and when the TensorRT engine of an ONNX Runtime artifact is built (on the board)."""

    built_here: bool
    where: str
    cache: str | None = None
    when: str
    work_dir: str


class RuntimeEntry(Entry):
    """How the artifact runs: the backend's runner, the model file, the settings the runner applies, the io map."""

    backend: str
    runner: str | None = None  # a backend registered from outside edgeopt: its runner's module
    model: str
    weights: str | None = None
    host_twin: HostTwin | None = None
    settings: JsonDict = {}
    float_layers: FloatLayers | None = None
    engine_build: EngineBuild | None = None
    optimized_model: str | None = None
    notes: list[str] | None = None
    io: RuntimeIO | None = None
    cascade: str | None = None  # an early-exit artifact: its cascade file


class StageEntry(Entry):
    """One stage as it ran: its config, its duration (``build.json``), its checks and its report."""

    name: str
    config: JsonDict = {}
    seconds: Figure | None = None
    checks: JsonDict = {}
    report: JsonDict = {}


class PlanStage(Entry):
    name: str
    config: JsonDict = {}


class PlanEntry(Entry):
    """The plan the artifact was built from, or a note saying why it has none (bench's reference, a wrapped file)."""

    profile: str | None = None
    backend: str | None = None
    precision: str | None = None
    stages: list[PlanStage] = []
    plan_hash: str | None = None
    note: str | None = None


class BackendSearchRow(Entry):
    """``--backend auto``: one backend built, its figures, chosen or dropped and why. ``speedup_vs_reference``: its
    speed-up over the reference runtime's FP32 run (``runtime/reference.py``), under its earlier name (which spelled
    the reference backend's) in manifests written before."""

    renamed: ClassVar[dict[str, str]] = {f"speedup_vs_{REFERENCE}_fp32": "speedup_vs_reference"}

    backend: str
    precision: str | None = None
    metric: str | None = None
    metric_drop: Figure | None = None
    units: JsonDict | None = None
    latency_ms: Figure | None = None
    speedup_vs_reference: Figure | None = None
    verdict: str | None = None
    exit_code: int | None = None
    why: str | None = None
    timing: str | None = None


class BoardError(Entry):
    """The board check's second rule (``remote/verify.py`` ``as_accurate``): the output's relative L2 error vs FP32
    on the board and here, and what the board may have."""

    here: float
    board: float
    allowed: float
    measure: str


class VerifiedOn(Entry):
    """``convert --verify-on``: the artifact run on the device against this host on the check samples."""

    device: str
    profile: str | None = None
    emulated: bool
    samples: int
    max_abs_diff: Figure | None = None
    tolerance: Figure | None = None
    rule: str | None = None
    error_vs_fp32: BoardError | None = None  # set when the output passed (or failed) by its error vs FP32
    passed: bool
    outputs: JsonDict = {}
    device_arch: str | None = None
    runtime: str | None = None
