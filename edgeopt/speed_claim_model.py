"""The manifest's ``speed_claim`` (:class:`SpeedClaim`): convert's speed-up, the search's estimate and the figure
measured on the written artifact (:mod:`edgeopt.speed_claim` measures it; this module imports nothing that
measures, so the manifest can hold it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from edgeopt.enums import ClaimSource

AGREE = 0.10  # the estimate and the measured speed-up agree when within this share of each other
# bench processes a claim takes when the first one does not agree with the search's estimate: some artifacts run at
# one of two speeds for a whole process (the median of three separate processes is what a user's benches give)
PROCESSES = 3


class SpeedClaim(BaseModel):
    """A claimed speed-up and the same speed-up measured on the written artifact (the manifest's ``speed_claim``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: ClaimSource
    reference: str  # the FP32 model measured beside the artifact, and in which runtime
    reference_artifact: str | None = None  # that reference as an artifact directory in edgeopt's cache: ``edgeopt
    # bench ARTIFACT REFERENCE_ARTIFACT`` repeats the measurement
    estimate: float  # the search's speed-up over FP32 (its quick timing, before the artifact was written)
    measured: float  # the written artifact's, by bench's measuring next to the reference: what convert prints
    # (the median of ``processes`` when the first bench process did not agree with the estimate)
    artifact_ms: float  # p50 of the written artifact (in the bench process whose speed-up is ``measured``)
    reference_ms: float  # p50 of the reference (the same process)
    runs: int  # timed calls of the side with fewer (the same process)
    processes: list[float] = []  # the speed-up each separate bench process measured, in order
    agree: bool  # the two speed-ups within AGREE of each other
    threads: int | None = None
    machine: str | None = None  # the CPU model
    busy: str | None = None  # bench's line when other processes took a share of the CPUs while it was measured
    warning: str | None = None  # said when they do not agree
