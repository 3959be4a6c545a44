"""The candidates of ``optimize`` built through the pipeline's cache (so each is validated on the eval data) and
measured interleaved with the shipped runners, within the search's deadline: one step keeps the fastest feasible."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from edgeopt.errors import EdgeoptError
from edgeopt.optimize.candidates import target_name
from edgeopt.optimize.result import Candidate
from edgeopt.pipeline.recipe import Gates, Target

STEP_MEASURE = {"warmup": 3, "min_runs": 20, "min_seconds": 0.3, "block_seconds": 0.1}
FINAL_MEASURE = {"warmup": 5, "min_runs": 40, "min_seconds": 0.6, "block_seconds": 0.1}


class CandidateBench:
    """The candidates built so far, the runners that time them, and the deadline they are built within."""

    def __init__(self, model: Path, profile, bound: float, calib, eval, shapes, deadline: float, say):
        self.model, self.profile, self.bound = model, profile, bound
        self.calib, self.eval, self.shapes, self.deadline, self.say = calib, eval, shapes, deadline, say
        self.gates = Gates(max_accuracy_drop=bound)
        self.candidates: list[Candidate] = []
        self.skipped: list[str] = []
        self.runners: dict[str, object] = {}
        self.tried: dict[str, list[Candidate]] = {}  # step -> the candidates it built (the waterfall's rows)
        self.search_budget: float | None = None  # seconds for each accuracy-aware INT8 search (None: default)
        self.metric = None  # edgeopt.metrics.MetricSpec (--metric; None: chosen from the output and labels)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def build(self, step: str, label: str, **fields) -> Candidate:
        from edgeopt.pipeline.cache import cached_convert
        from edgeopt.pipeline.run import plan_recipe

        t = Target(name=target_name(label), profile=self.profile.name, **fields)
        c = Candidate(step=step, label=label, target=t.model_dump(mode="json", exclude_defaults=True))
        self.say(f"[{step}] building {label}")
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr):  # library prints must not reach --json's stdout
                recipe = plan_recipe(t, self.gates, self.metric)
                if self.search_budget is not None:
                    recipe = recipe.model_copy(update={"search_budget": self.search_budget})
                b = cached_convert(self.model, self.profile, recipe=recipe, calib=self.calib,
                                   eval=self.eval, input_shapes=self.shapes)
        except Exception as err:  # noqa: BLE001 - a candidate that can't be built is recorded, the search goes on
            c.error = err.one_line() if isinstance(err, EdgeoptError) else f"{type(err).__name__}: {err}"[:300]
            self.last_error = err
            self.say(f"[{step}] {label}: {c.error}")
            self.candidates.append(c)
            return c
        from edgeopt.artifact import load_artifact

        v = load_artifact(b.artifact).validation
        c.artifact, c.cached, c.build_seconds = str(b.artifact), b.cached, round(time.perf_counter() - t0, 3)
        from edgeopt.validation_model import counted_drop, holds_bound, within_bound

        drop, vs_fp32 = counted_drop(v)  # the one rule the gates use: labels, else the task metric vs FP32
        if drop is not None and not vs_fp32:
            c.accuracy, c.accuracy_reference, c.accuracy_drop = v.accuracy, v.accuracy_reference, drop
            c.accuracy_basis = "labels"
        elif drop is not None:
            c.accuracy, c.accuracy_reference, c.accuracy_drop = v.metric_value, v.metric_reference, drop
            c.accuracy_basis = f"{v.metric} (vs FP32, no labels)"
        elif v is not None and v.top1_agreement is not None:  # synthetic inputs: agreement with FP32, the last resort
            c.accuracy = round(100.0 * v.top1_agreement, 4)
            c.accuracy_drop = round(100.0 - c.accuracy, 4)
            c.accuracy_basis = "agreement with FP32 (no labels)"
        # the convert gate's rules (one sample of room, or the halves rule), judged as the INT8 search judged
        c.feasible = holds_bound(v, self.bound) if drop is not None else within_bound(c.accuracy_drop, self.bound, None)
        c.halves_drop_p90 = v.halves_drop_p90 if drop is not None else None
        self.candidates.append(c)
        return c

    def _runner(self, artifact: str):
        """The shipped runner with its backend's ``interleaved_settings`` (ONNX Runtime's pool threads sleep after
        each call), so it doesn't steal the cores of the candidate timed next (a setting of this timing only)."""
        if artifact not in self.runners:
            from edgeopt.converters.registry import hooks_of
            from edgeopt.runtime.runners import open_runner, read_manifest

            manifest = read_manifest(artifact)
            quiet = hooks_of(manifest["runtime"]["backend"]).interleaved_settings
            if quiet:
                manifest["runtime"].setdefault("settings", {}).update(quiet)
            self.runners[artifact] = open_runner(artifact, manifest=manifest)
        return self.runners[artifact]

    def measure(self, cands: list[Candidate], settings: dict) -> None:
        """Median latency of each built candidate, interleaved (they share the machine's noise)."""
        from edgeopt.runtime.measure import (
            feeds_from_npz,
            measure_interleaved,
            read_artifact,
            synthetic_feeds,
        )

        groups: dict[str, list[Candidate]] = {}
        for c in cands:
            if c.artifact and all(c is not o for o in groups.get(c.artifact, [])):
                groups.setdefault(c.artifact, []).append(c)
        if not groups:
            return
        ev = Path(self.eval) if self.eval else None
        from edgeopt.optimize.early_exit import cycling_run, has_cascade

        cycle = ev is not None and ev.suffix == ".npz" and has_cascade(groups)  # a cascade's time depends on the input
        fns = []
        for artifact in groups:
            manifest = read_artifact(artifact)
            if cycle:
                fns.append(cycling_run(self._runner(artifact), manifest["inputs"], str(ev)))
                continue
            feeds = feeds_from_npz(manifest["inputs"], str(ev)) if ev is not None and ev.suffix == ".npz" \
                else synthetic_feeds(manifest["inputs"])
            fns.append(lambda r=self._runner(artifact), f=feeds: r.run(f))
        for same, m in zip(groups.values(), measure_interleaved(fns, **settings), strict=True):
            for c in same:
                c.p50_ms, c.p90_ms, c.runs = m["latency_ms"]["p50"], m["latency_ms"]["p90"], m["runs"]

    def step(self, name: str, incumbent: Candidate, options: list[tuple[str, dict]], prefer_new: float = 0.0) -> Candidate:
        """Build and measure ``options`` against the incumbent; the fastest feasible is kept. A lossless
        step (fusion) is kept unless it is ``prefer_new`` (a fraction) slower: within the noise."""
        cands = []
        for label, fields in options:
            if self.left_s() <= 0:
                self.skipped.append(f"{name}: {label}: time budget spent")
                continue
            cands.append(self.build(name, label, **fields))
        self.tried.setdefault(name, []).extend(cands)
        self.measure([incumbent, *cands], STEP_MEASURE)
        pool = [c for c in (incumbent, *cands) if c.feasible and c.p50_ms is not None]
        if not pool:
            return incumbent
        return min(pool, key=lambda c: c.p50_ms * (1.0 - prefer_new if c is not incumbent else 1.0))

    def close(self) -> None:
        for r in self.runners.values():
            close = getattr(r, "close", None)
            if close:
                close()
