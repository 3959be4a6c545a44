"""``optimize``: the progressive path as an automatic search, measured here.

Steps, in order, each starting from the best configuration so far (the *incumbent*):

1. ``baseline``: ONNX Runtime FP32, the graph as given (``normalize.fold: false``);
2. ``fusion``: constant folding and Conv/BN fusion (onnxslim);
3. ``pruned``/``recovered``: ``--prune auto`` on the incumbent (the largest channel-pruning ratio whose
   recovered student stays within the bound on calibration data the search holds back, see
   :mod:`edgeopt.converters.prune_auto`), its recovery budget capped by what is left of optimize's own;
   the chosen ratio is also built without recovery, so the waterfall shows what pruning alone costs;
4. ``int8``: each INT8 mode x backend the profile lists and that is installed, where the mode fits the graph
   as ``--quant-mode auto`` decides (dynamic and weight-only for MatMul/LSTM/GRU-heavy graphs, static for
   convolutional ones; ONNX Runtime's static with MinMax and Percentile calibration, per-channel), on the
   incumbent (a recovered student is recovered again at the chosen ratio, seeded, inside the INT8 build);
   accuracy-aware (the mode search, options, sensitive layers kept in float) on the backend that came nearest
   the bound, only when none meets it (:mod:`.candidates`);
5. ``float``: each native float precision x backend (bf16 on AMX/AVX512-BF16 CPUs with OpenVINO, fp16 on GPUs
   and ARMv8.2 FP16; :func:`edgeopt.float_precisions.native_float_precisions`), fp32 on the other backends,
   kept only when faster than the INT8 incumbent;
6. ``early-exit``: ``--early-exit auto`` on the fastest INT8 candidate that can be staged and on the fastest
   float one, for a classifier given ``--calib`` and ``--eval`` (:mod:`.early_exit`); a measurement with a cascade in
   it runs every candidate over the same samples of ``--eval`` in turn (a cascade's time depends on the input);
7. ``tvm-tune``: MetaSchedule tuning, only when the TVM backend is installed and the time budget
   allows (tuning took 15 min for 96 trials here and still lost to ONNX Runtime, pitfalls.md).

Every candidate is converted through the pipeline's cache (so it is validated on the eval data)
and measured with the device-side core, interleaved with the incumbent (short runs). At the end
all built candidates are measured once more, interleaved, and the fastest whose accuracy drop is
within the bound wins; the waterfall and the Pareto front use those final figures. Timing is fair across
runtimes: each candidate runs in its own blocks of calls, the blocks alternating, and ONNX Runtime's pool
threads sleep after a call instead of spinning (they would steal the next runtime's cores, pitfalls.md).
The waterfall has a row for every candidate of the precision steps, with why it was dropped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from edgeopt.enums import BackendName
from edgeopt.errors import EdgeoptError, UsageError
from edgeopt.files import write_text_atomic
from edgeopt.optimize.candidates import dropped_why, folded, target_fields, target_label, target_name
from edgeopt.pipeline.recipe import Gates, Target
from edgeopt.run_tmp import run_temp_dir

STEP_MEASURE = {"warmup": 3, "min_runs": 20, "min_seconds": 0.3, "block_seconds": 0.1}
FINAL_MEASURE = {"warmup": 5, "min_runs": 40, "min_seconds": 0.6, "block_seconds": 0.1}
RECOVER_BUDGET_MAX_S = 120.0  # the recover stage's own default
RECOVER_BUDGET_SHARE = 0.25  # at most this share of optimize's time left goes to the prune-ratio search
RECOVER_BUDGET_MIN_S = 10.0
FUSION_TIE = 0.05  # fusion is lossless: kept unless measured more than 5 % slower (short runs are noisy)
TVM_TUNE_MIN_BUDGET_MIN = 15.0


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


class _Search:
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
        """The shipped runner; an ONNX Runtime session's pool threads sleep after each call (no spin-wait), so
        they don't steal the cores of the candidate timed next (a setting of this timing, not the artifact)."""
        if artifact not in self.runners:
            from edgeopt.runtime.runners import open_runner, read_manifest

            manifest = read_manifest(artifact)
            if manifest["runtime"]["backend"] == BackendName.ONNXRUNTIME.value:
                manifest["runtime"].setdefault("settings", {})["allow_spinning"] = False
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


def _search(s: _Search, backends: list[str]) -> list[dict]:
    """Run the steps; returns the incumbent after each step (for the waterfall)."""
    trail = []
    base_f = {"backend": "onnxruntime", "precision": "fp32", "stages": {"normalize": {"fold": False}}}
    inc = s.build("baseline", target_label(base_f), **base_f)
    if inc.error:  # the baseline's own error, with its exit code and hint (bad data is not a model problem)
        err = getattr(s, "last_error", None)
        if isinstance(err, EdgeoptError):
            raise err
        from edgeopt.errors import StageError

        raise StageError(f"the baseline (ONNX Runtime FP32) failed: {inc.error}",
                         "--debug shows the traceback") from err
    s.measure([inc], STEP_MEASURE)
    trail.append(("baseline", inc))
    f = {"backend": "onnxruntime", "precision": "fp32"}
    inc = s.step("fusion", inc, [(target_label(f), f)], prefer_new=FUSION_TIE)
    trail.extend(("fusion", c, c is inc) for c in s.tried.get("fusion", []))  # the fused build, kept or not
    inc = _prune_steps(s, inc, trail)
    before_precision = inc
    inc = _precision_steps(s, inc, backends, trail)
    from edgeopt.optimize.early_exit import early_exit_step

    inc = early_exit_step(s, inc, before_precision, trail)
    return [{"step": t[0], "candidate": t[1], "kept": t[2] if len(t) > 2 else True} for t in trail]


def _precision_steps(s: _Search, inc: Candidate, backends: list[str], trail: list) -> Candidate:
    """``int8`` (each mode x backend that fits the graph; accuracy-aware only when none holds the bound) and
    ``float`` (each native float precision x backend); every candidate a waterfall row."""
    from edgeopt.model import load_onnx
    from edgeopt.optimize.candidates import accuracy_aware_option, base_fields, float_options, int8_options

    base = base_fields(target_fields(inc, **_fixed_ratio(inc)))  # a recovered student: its ratio, recovered again
    options, notes = int8_options(load_onnx(s.model), backends, base)
    s.skipped.extend(notes)
    best = s.step("int8", inc, [(target_label(f), f) for f in options])
    near = [c for c in s.tried.get("int8", []) if c.accuracy_drop is not None]
    if not any(c.feasible for c in near):  # none met the bound: accuracy-aware on the nearest backend
        if near:
            aa = accuracy_aware_option(min(near, key=lambda c: c.accuracy_drop).target, base)
            best = s.step("int8", best, [(target_label(aa), aa)])
    have = (inc.target.get("backend", "onnxruntime"), inc.target.get("precision", "fp32"))
    after = s.step("float", best, [(target_label(f), f) for f in float_options(s.profile, backends, base, have=have)])
    for step, kept in (("int8", best), ("float", after)):
        trail.extend((step, c, c is kept) for c in s.tried.get(step, []))
    return after


def _chosen_ratio(c: Candidate) -> float | None:
    """The ratio ``--prune auto`` chose for candidate ``c`` (from its manifest), None when it did not prune."""
    from edgeopt.artifact import load_artifact

    if not c.artifact:
        return None
    stage = next((st for st in load_artifact(c.artifact).stages if st["name"] == "prune"), None)
    ratio = (stage or {}).get("report", {}).get("ratio")
    return float(ratio) if ratio else None


def _fixed_ratio(inc: Candidate) -> dict:
    """Fields that rebuild ``inc``'s auto-chosen prune at its ratio (empty when ``inc`` is not an auto prune)."""
    if inc.target.get("prune") != "auto":
        return {}
    ratio = _chosen_ratio(inc)
    return {"prune": ratio} if ratio else {"prune": None, "recover": None, "search_budget": None}


def _prune_steps(s: _Search, inc: Candidate, trail: list) -> Candidate:
    """``pruned`` and ``recovered``: --prune auto on the incumbent, its search budget (recovery included) capped by
    optimize's budget;
    the chosen ratio built without recovery too (measured, shown in the waterfall, kept only if it is best)."""
    from edgeopt.converters.recover import train_extra_missing

    if not s.calib:
        s.skipped.append("prune: --prune auto needs --calib (it prunes and recovers on it)")
        return inc
    missing = train_extra_missing()
    if missing:
        s.skipped.append(f"recover: {missing} is not installed (pip install 'edgeopt[train]'): pruning is searched "
                         "without recovery")
    budget = max(RECOVER_BUDGET_MIN_S, min(RECOVER_BUDGET_MAX_S, RECOVER_BUDGET_SHARE * s.left_s()))
    auto = folded(target_fields(inc, prune="auto", recover=not missing, search_budget=round(budget)))
    if s.left_s() <= 0:
        s.skipped.append("prune: time budget spent")
        return inc
    searched = s.build("recovered" if not missing else "pruned", target_label(auto), **auto)
    ratio = _chosen_ratio(searched)
    cands = [searched]
    if ratio and not missing and s.left_s() > 0:
        plain = folded(target_fields(inc, prune=ratio, recover=False))
        cands.insert(0, s.build("pruned", target_label(plain), **plain))
    elif not ratio and not searched.error:
        s.skipped.append("prune: no ratio stayed within the bound on the held-back calibration data")
    s.measure([inc, *cands], STEP_MEASURE)
    pool = [c for c in (inc, *cands) if c.feasible and c.p50_ms is not None]
    best = min(pool, key=lambda c: c.p50_ms) if pool else inc
    for c in cands:
        trail.append((c.step, c, c is best))
    return best


def _installed_backends(profile) -> tuple[list[str], list[str]]:
    from edgeopt.plan import backend_class

    ok, skipped = [], []
    for b in profile.backends:
        try:
            backend_class(b.name)
            ok.append(b.name.value)
        except EdgeoptError as err:
            skipped.append(f"backend {b.name.value}: {err.message}")
    return ok, skipped


def _check_data(path: Path, specs, shapes: dict, calib, eval, spec) -> None:
    """Unreadable data, or labels that can't be the model's classes, fail now (naming the file), not in every
    candidate; so does a custom metric that does not import."""
    from edgeopt.applicability import check_metric_against_outputs
    from edgeopt.data import load_data
    from edgeopt.model import TensorSpec, graph_outputs, load_onnx
    from edgeopt.validate import check_task_metric

    check_metric_against_outputs(spec, graph_outputs(load_onnx(path)))  # a flag no build could apply: exit 2 now
    fixed = [TensorSpec(sp.name, shapes[sp.name], sp.dtype) for sp in specs]  # as each build will see them
    for data_path, role in ((calib, "calib"), (eval, "eval")):
        if data_path:
            ds = load_data(data_path, fixed, role=role)
            if role == "eval":
                check_task_metric(path, shapes, ds, "eval", spec)
    if spec is not None and spec.custom and not eval:
        from edgeopt.metrics.custom import load_callable

        load_callable(spec.custom)


def _tvm_tune_note(s: _Search, backends: list[str]) -> str:
    if "tvm" not in backends:
        return "tvm-tune: the tvm backend is not installed"
    if s.left_s() / 60 < TVM_TUNE_MIN_BUDGET_MIN:
        return (f"tvm-tune: needs >= {TVM_TUNE_MIN_BUDGET_MIN:g} min of budget left ({s.left_s() / 60:.1f} min "
                "left); run 'edgeopt tune' separately")
    return "tvm-tune: not run by optimize; tune with 'edgeopt tune' (its database is picked up)"


@run_temp_dir()  # one temp dir for the libraries' leftovers, removed whatever the outcome (edgeopt/run_tmp.py)
def optimize(model, profile="host", *, max_accuracy_drop: float = 1.0, time_budget_min: float = 10.0,
             calib=None, eval=None, output=None, recipe_out=None, force: bool = False,
             on_event: Callable[[str], None] | None = None, search_budget: float | None = None,
             metric=None) -> OptimizeResult:
    """Search the progressive path for ``model`` on ``profile``; see the module doc."""
    from edgeopt.model import graph_inputs, load_onnx
    from edgeopt.optimize.pareto import pareto_front
    from edgeopt.profiles import DeviceProfile, load_profile
    from edgeopt.runtime import environment

    t0 = time.monotonic()
    say = on_event or (lambda _m: None)
    if max_accuracy_drop < 0:
        raise UsageError(f"--max-accuracy-drop {max_accuracy_drop} is negative", "give points of top-1, e.g. 1")
    if time_budget_min <= 0:
        raise UsageError(f"--time-budget {time_budget_min} must be positive (minutes)")
    from edgeopt.outputs import check_output

    out = check_output(output, force=force, inputs=(model, calib, eval, recipe_out)) if output else None
    prof = profile if isinstance(profile, DeviceProfile) else load_profile(str(profile))
    from edgeopt.metrics import as_metric_spec

    path = Path(model)
    specs = graph_inputs(load_onnx(path))
    shapes = {s.name: tuple(d if isinstance(d, int) and d > 0 else 1 for d in s.shape) for s in specs}
    spec = as_metric_spec(metric)
    _check_data(path, specs, shapes, calib, eval, spec)
    s = _Search(path, prof, max_accuracy_drop, calib, eval, shapes, t0 + time_budget_min * 60, say)
    s.search_budget = search_budget
    s.metric = spec
    backends, skipped = _installed_backends(prof)
    s.skipped.extend(skipped)
    env = environment.collect("local")
    try:
        trail = _search(s, backends)
        s.skipped.append(_tvm_tune_note(s, backends))
        say("final interleaved measurement of every built candidate")
        s.measure(s.candidates, FINAL_MEASURE)
    finally:
        s.close()
    environment.after(env)
    feasible = [c for c in s.candidates if c.feasible and c.p50_ms is not None]
    winner = min(feasible, key=lambda c: c.p50_ms) if feasible else None
    waterfall = []
    for row in trail:  # the path's steps; pruned/recovered and every precision candidate shown, kept or not
        c = row["candidate"]
        waterfall.append({"step": row["step"], "label": c.label, "p50_ms": c.p50_ms, "accuracy": c.accuracy,
                          "accuracy_drop": c.accuracy_drop, "halves_drop_p90": c.halves_drop_p90,
                          "within_bound": c.feasible, "kept": row["kept"],
                          "why": dropped_why(c, winner, max_accuracy_drop), **({"error": c.error} if c.error else {})})
    points = [c.model_dump(include={"label", "p50_ms", "accuracy", "accuracy_drop", "feasible"})
              for c in s.candidates if c.artifact]
    result = OptimizeResult(model=str(path), profile=prof.name, max_accuracy_drop=max_accuracy_drop, winner=winner,
                            waterfall=waterfall, pareto=pareto_front(points), candidates=s.candidates,
                            skipped=s.skipped, environment=env)
    if winner is not None and out is not None:
        _copy_artifact(Path(winner.artifact), out, force)
        result.output = str(out)
    if winner is not None and (out is not None or recipe_out):
        rp = Path(recipe_out) if recipe_out else out.with_name(f"{out.name}.edgeopt.yaml")
        result.recipe = str(write_recipe(rp, path, prof.name, winner, shapes, calib, eval, max_accuracy_drop, spec))
    result.seconds = round(time.monotonic() - t0, 3)
    return result


def _copy_artifact(src: Path, out: Path, force: bool) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        from edgeopt.outputs import publish

        shutil.copytree(src, tmp / "a")
        (tmp / "a").chmod(0o755)
        publish(tmp / "a", out, force=force)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_recipe(path: Path, model: Path, profile: str, winner: Candidate, shapes: dict, calib, eval,
                 bound: float, metric=None) -> Path:
    """The winner as an ``edgeopt.yaml`` the pipeline rebuilds (same plan, so a cache hit)."""
    import yaml

    from edgeopt.pipeline.recipe import parse_recipe

    base = path.resolve().parent

    def rel(p):
        return None if p is None else os.path.relpath(Path(p).resolve(), base)

    target = {"name": f"{profile}-{winner.label}".replace(" ", "-").replace("%", "pct"), "profile": profile,
              **{k: v for k, v in winner.target.items() if k not in ("name", "profile")}}
    data = {"version": 1, "model": {"path": rel(model), "inputs": {k: list(v) for k, v in shapes.items()}},
            "data": {k: v for k, v in (("calib", rel(calib)), ("eval", rel(eval))) if v is not None},
            "output": "dist", "gates": {"max_accuracy_drop": bound}, "targets": [target]}
    if metric is not None:
        data["metric"] = metric.model_dump(mode="json", exclude_defaults=True)
    parse_recipe(data, str(path))  # what we write must load
    head = (f"# written by edgeopt optimize: the fastest candidate within {bound:g} accuracy points "
            f"({winner.label}, p50 {winner.p50_ms:.4f} ms here)\n# rebuild: edgeopt pipeline run {path.name}\n")
    write_text_atomic(path, head + yaml.safe_dump(data, sort_keys=False))
    return path
