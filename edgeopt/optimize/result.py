"""What ``optimize`` returns: each candidate it built (its target, figures and whether it holds the bound) and
the result of the whole search."""

from __future__ import annotations

from pydantic import BaseModel


class Candidate(BaseModel):
    step: str
    label: str
    target: dict  # the pipeline Target fields (exclude defaults): what rebuilds it
    artifact: str | None = None
    cached: bool | None = None
    build_seconds: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    runs: int | None = None
    accuracy: float | None = None
    accuracy_reference: float | None = None
    accuracy_drop: float | None = None
    accuracy_basis: str | None = None  # "labels" or "agreement with FP32 (no labels)"
    halves_drop_p90: float | None = None  # the drop on 1 in 10 random halves of the eval data (not counted metrics)
    feasible: bool = False
    repeats_base: bool = False  # the same model as the candidate it was built on (an early-exit build that kept no
    # exit): shown in the waterfall, never a point of its own on the Pareto front
    error: str | None = None
    note: str | None = None  # why a built candidate is out of the running (an early-exit build that kept no exit)


class OptimizeResult(BaseModel):
    model: str
    profile: str
    max_accuracy_drop: float
    winner: Candidate | None
    waterfall: list[dict]
    pareto: list[dict]
    candidates: list[Candidate]
    skipped: list[str] = []
    output: str | None = None
    recipe: str | None = None
    environment: dict | None = None
    seconds: float = 0.0
