"""What the INT8 search builds and returns: a scored candidate, the search's result, and the shapes of the
backend's build and ranking functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Rank = Callable[[Any, float], list]  # (option's artifact, deadline on time.perf_counter()) -> [(op, score)], best first
Build = Callable[[], tuple[Any, Callable]]  # () -> (artifact, run function feed -> {name: array})


@dataclass
class Candidate:
    label: str
    kept: tuple[str, ...] = ()
    search_value: float | None = None
    confirm_value: float | None = None
    all_value: float | None = None  # on both parts together
    search_upper: float | None = None  # the upper confidence limit of the drop on the search part
    confirm_upper: float | None = None  # ... on the held-back part (at confirm_level)
    confirm_level: float | None = None
    all_upper: float | None = None  # ... on all the eval samples (the convert gate's judgement)
    halves_p90: float | None = None  # the drop at the 90th percentile of random halves of both (HALVES)
    seconds: float = 0.0
    entry: dict | None = field(default=None, repr=False)  # its row in the report's ``tried``
    artifact: Any = None
    met: bool = False  # selected on the search part; once confirm_choice ran, confirmed as well
    not_built: str | None = None  # the quantizer's reason when it failed to build this candidate (a miss)
    run: Any = field(default=None, repr=False)  # its run function (the held-back confirmation runs it)
    searched: list = field(default_factory=list, repr=False)  # its search-part digests


@dataclass
class SearchResult:
    best: Candidate | None  # the candidate that met the bound on both parts (None: none did)
    closest: Candidate  # the best search-part figure reached (what the gate failure names)
    ranked: list[tuple[str, float]] = field(default_factory=list)
    report: dict = field(default_factory=dict)
    m_confirm: Any = None  # the metric on the held-back part (for checking other precisions the same way)
    m_search: Any = None
    judge: Callable | None = None  # BudgetedSearch.judge: a run scored and confirmed the one way (a rebuilt hit)
