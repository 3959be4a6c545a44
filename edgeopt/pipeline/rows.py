"""One target of a pipeline run, typed: what ``summary.json`` and ``PipelineResult.targets`` hold for it."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from edgeopt.validation_model import Validation


class TargetStatus(StrEnum):
    OK = "ok"
    GATE_FAILED = "gate_failed"
    BUILD_FAILED = "build_failed"


class TargetRow(BaseModel):
    """A target's row. Its JSON has the keys that were set: a target that failed to build has no figures."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str
    profile: str
    backend: str | None = None
    status: TargetStatus | None = None
    # a failure: its one line, exit code and, for gates, each gate missed
    error: str | None = None
    exit_code: int | None = None
    failed_gates: list[str] | None = None
    # a build: the artifact (a folder under dist/, by name once packaged) and its facts
    artifact: Path | str | None = None
    precision: str | None = None
    cached: bool | None = None
    cache_key: str | None = None
    plan_hash: str | None = None
    build_seconds: float | None = None
    artifact_bytes: int | None = None
    files: dict[str, str] | None = None
    content_hash: str | None = None
    determinism: dict[str, Any] | None = None
    build_facts: dict[str, Any] | None = None
    validation: Validation | None = None  # the artifact's, from its manifest
    warnings: list[str] = []
    # measured and gated
    bench: dict[str, Any] | None = None
    estimate: dict[str, Any] | None = None
    gates: list[dict[str, Any]] | None = None
    # packaged
    tarball: dict[str, Any] | None = None
    c_array: dict[str, Any] | None = None

    # what the run needs while it builds, never in the summary
    _gates: Any = PrivateAttr(default=None)
    _profile: Any = PrivateAttr(default=None)
    _manifest: dict | None = PrivateAttr(default=None)

    def summary_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)
