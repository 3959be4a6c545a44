"""One benchmark run: :class:`RunRecord`, what local ``bench`` and ``remote-bench`` return and the results
store accepts (:func:`edgeopt.results.store_run`). Its id in the store is ``run_id``, wherever it ran.

The measurement itself comes from the runner's JSON (``edgeopt/runtime/measure.py`` ``run_record``, which runs
on devices with no pydantic: plain dicts there); the caller adds where it ran, then validates it into a
RunRecord. Unknown keys are errors: a new figure is declared here first. Nested blocks the runner and the
identity code own (environment, identity, throughput, validation…) stay dicts.

Fields never set are left out of its JSON (the same keys as the dict it was made from). Code that reads runs
by key (the bench table, the pipeline, the CLI) may keep ``record["p50"]``-style access: ``[]``, ``get``,
``in`` and ``[] =`` read and write the fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_serializer
from typing_extensions import NotRequired, TypedDict

from edgeopt.enums import BackendName, Precision, RunLocation


class LatencyStats(TypedDict):
    """Milliseconds per inference over the timed runs (``runtime/measure.py``)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    p50: float
    p90: NotRequired[float]
    p99: NotRequired[float]
    mean: NotRequired[float]
    std: NotRequired[float]
    min: NotRequired[float]
    max: NotRequired[float]
    ci95_low: NotRequired[float]
    ci95_high: NotRequired[float]
    ci_coverage: NotRequired[float]
    n: NotRequired[int]


class RunInputs(TypedDict):
    """What was fed: an ``--inputs`` file or random inputs, and how much of the file was used."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    source: NotRequired[str]
    synthetic: bool
    samples_in_file: NotRequired[int]
    samples_used: NotRequired[int]


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # --- the measurement, as the runner prints it (runtime/measure.py: run_record + measure)
    schema_version: int | None = None
    artifact: str | None = None
    artifact_hash: str | None = None
    backend: BackendName | None = None
    precision: Precision | None = None
    profile: str | None = None  # the profile the artifact was built for
    model: str | None = None
    model_name: str | None = None
    validation: dict[str, Any] | None = None  # the converter's validation (or the reference's accuracy)
    inputs: RunInputs | None = None
    runs: int | None = None
    warmup: int | None = None
    stop_rule: str | None = None
    rules: dict[str, Any] | None = None
    timed_seconds: float | None = None
    latency_ms: LatencyStats
    throughput_qps: float | None = None
    throughput_mode: str | None = None
    throughput: dict[str, Any] | None = None  # parallel streams / batching (runtime/throughput.py)
    first_inference_ms: float | None = None
    samples_ms: list[float] | None = None
    peak_rss_mb: float | None = None
    load_rss_mb: float | None = None
    memory: dict[str, Any] | None = None  # bench --memory: measured peak (child process) beside the prediction
    cpu_utilisation: float | None = None
    cores: int | dict[str, Any] | None = None  # the runner's count; remote-bench: the device's cores and use
    load_ms: float | None = None
    threads: int | None = None
    energy: dict[str, Any] | None = None
    environment: dict[str, Any]
    exclusive: bool | None = None  # measured inside the board lock (device runner)
    board_lock: dict[str, Any] | None = None
    # --- where it ran (edgeopt.identity)
    identity: dict[str, Any] | None = None
    device: str | None = None  # where it was measured: this host's name, or the device's
    location: RunLocation | None = None
    energy_figures: dict[str, Any] | None = None
    warnings: list[str] | None = None
    # which provider/device ran it and how (the runner's ``execution``: e.g. CUDA running Q/DQ "as float with Q/DQ
    # kernels"), and which op ran on which unit (edgeopt/placement)
    execution: dict[str, Any] | None = None
    placement: dict[str, Any] | None = None
    labels: dict[str, str] | None = None
    run_id: int | None = None  # its id in the results store (None: not stored)
    # --- local bench: one row of a side-by-side table
    name: str | None = None
    interleaved_with: int | None = None
    per_layer: dict[str, Any] | None = None
    best: bool | None = None
    status: str | None = None
    # --- remote-bench: the device and the trip there
    device_profile: str | None = None
    emulated: bool | None = None
    timings_label: str | None = None
    artifact_on_device: str | None = None
    converted: dict[str, Any] | None = None  # the conversion remote-bench made of a model (None: an artifact)
    device_facts: dict[str, Any] | None = None
    upload: dict[str, Any] | None = None
    run_dir: str | None = None
    cleaned_stale_runs: Any = None
    wall_seconds: float | None = None
    labgrid: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler):
        data = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    # read and write by key, as the code that reads runs as dicts does
    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def __contains__(self, key: object) -> bool:
        return key in self.model_fields_set

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.model_fields_set else default

    def to_json(self) -> dict:
        return self.model_dump(mode="json")
