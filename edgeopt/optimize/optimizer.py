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

The steps are in :mod:`.steps`, the building and timing of a candidate in :mod:`.candidate_bench`, what is
returned in :mod:`.result`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from edgeopt.errors import EdgeoptError, UsageError
from edgeopt.files import write_text_atomic
from edgeopt.optimize.candidate_bench import FINAL_MEASURE, CandidateBench
from edgeopt.optimize.candidates import dropped_why
from edgeopt.optimize.result import Candidate, OptimizeResult
from edgeopt.optimize.steps import run_steps
from edgeopt.run_tmp import run_temp_dir

TUNE_MIN_BUDGET_MIN = 15.0  # minutes of budget a kernel search (TVM MetaSchedule) needs left to pay


def _installed_backends(profile) -> tuple[list[str], list[str]]:
    from edgeopt.backend_choice import backend_class

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


def _tune_notes(s: CandidateBench, backends: list[str]) -> list[str]:
    """Why no kernels were tuned: one note for each backend whose kernels ``edgeopt tune`` tunes (its hooks'
    ``tunes``)."""
    from edgeopt.converters.registry import backend_hooks

    return [_tune_note(s, b.value, backends) for b, hooks in backend_hooks().items() if hooks.tunes]


def _tune_note(s: CandidateBench, name: str, backends: list[str]) -> str:
    if name not in backends:
        return f"{name}-tune: the {name} backend is not installed"
    if s.left_s() / 60 < TUNE_MIN_BUDGET_MIN:
        return (f"{name}-tune: needs >= {TUNE_MIN_BUDGET_MIN:g} min of budget left ({s.left_s() / 60:.1f} min "
                "left); run 'edgeopt tune' separately")
    return f"{name}-tune: not run by optimize; tune with 'edgeopt tune' (its database is picked up)"


@run_temp_dir()  # one temp dir for the libraries' leftovers, removed whatever the outcome (edgeopt/run_tmp.py)
def optimize(model, profile="host", *, max_accuracy_drop: float = 1.0, time_budget_min: float = 10.0,
             calib=None, eval=None, output=None, recipe_out=None, force: bool = False,
             on_event: Callable[[str], None] | None = None, search_budget: float | None = None,
             metric=None) -> OptimizeResult:
    """Search the progressive path for ``model`` on ``profile``; see the module doc."""
    from edgeopt.converters.registry import distributions
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
    s = CandidateBench(path, prof, max_accuracy_drop, calib, eval, shapes, t0 + time_budget_min * 60, say)
    s.search_budget = search_budget
    s.metric = spec
    backends, skipped = _installed_backends(prof)
    s.skipped.extend(skipped)
    env = environment.collect("local", libraries=distributions())
    try:
        trail = run_steps(s, backends)
        s.skipped.extend(_tune_notes(s, backends))
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
              for c in s.candidates if c.artifact and not c.repeats_base]
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
