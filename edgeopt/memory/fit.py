"""The manifest's memory record: what the artifact is predicted (and, where measured, measured) to need against
the budget it was built for."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from edgeopt.memory.predict import MemoryPrediction


class MemoryFit(BaseModel):
    """``predicted`` (an estimate, without its per-op series), the ``budget_bytes`` held against and where that
    figure comes from, whether it ``fits``; ``adapted``: the precision/mode convert chose to make it fit and what
    the request needed; ``measured``: peak resident memory measured here (bench), when measured."""

    model_config = ConfigDict(extra="forbid")

    predicted: MemoryPrediction
    budget_bytes: int
    budget_source: str
    fits: bool
    adapted: dict | None = None
    measured: dict | None = None
