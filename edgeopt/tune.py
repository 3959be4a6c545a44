"""``edgeopt tune MODEL --profile P --trials N | --time-budget MIN``: kernel tuning for the backend whose hooks
tune (``BackendHooks.tunes``: TVM's MetaSchedule).

The plan is the one ``convert --backend tvm`` makes for the same options, recipe and profile
(:func:`tune_plan`: the same ``make_plan`` call on the same :class:`edgeopt.options.ConvertOptions`), and the
model goes through that plan's stages before the backend (normalize, prune, recover, qdq) with the same
data and task metric, so the graph tuned is the graph ``convert`` builds and the database's content-hash key
(:func:`edgeopt.converters.backends.tvm.build.tuning_key`) is the one ``convert`` finds again in
``$EDGEOPT_CACHE_DIR/tvm-tuning/<key>``. ``tuning_db`` (``--tuning-db DIR``, else the recipe's
``stages: {tvm: {tuning_db: DIR}}``) puts it elsewhere. The search itself, the backend's alone, is its hooks'
``tune`` (TVM's :func:`edgeopt.converters.backends.tvm.tune.tune_database`). A tuned database changes the next plan's hash
(the TVM config's ``tuning_db_sha256``), so cached builds made before it are not served after it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from edgeopt.errors import UsageError
from edgeopt.options import ConvertOptions


class TuneResult(BaseModel):
    model: str
    profile: str
    precision: str
    plan_hash: str  # the plan tuned for, as 'convert --dry-run' shows it before this run's records
    target: dict
    key: str
    database: str
    runner: str  # "local" or "rpc <host:port> key <key>"
    tasks: list[str]
    trials_requested: int | None
    time_budget_min: float | None
    trials_measured: int = 0
    trials_failed: int = 0
    records: int = 0  # records in the database after the run (earlier runs included)
    seconds: float = 0.0
    stopped_by: str = "trials"  # "trials", "time-budget" or "interrupted"
    cost_model: str = "xgb"  # "xgb" when xgboost is installed, else "random" (MetaSchedule's built-ins)
    best_ms: dict[str, float] = {}  # task name -> best measured latency (ms), this run
    warnings: list[str] = []


def tuned_backend():
    """The backend ``tune`` tunes (its ``BackendName``, the one whose hooks tune) and its hooks."""
    from edgeopt.converters.registry import backend_hooks

    return next((b, h) for b, h in backend_hooks().items() if h.tunes)


def _options(options: ConvertOptions | None, keywords: dict, where: str) -> ConvertOptions:
    from edgeopt.options import from_keywords

    if options is not None and keywords:
        raise UsageError(f"{where}: give the options as ConvertOptions or as keywords, not both ({', '.join(keywords)})")
    o = options if options is not None else from_keywords(ConvertOptions, keywords, where=where)
    tuned = tuned_backend()[0].value
    if o.backend not in (None, tuned):
        raise UsageError(f"{where} tunes the {tuned} backend, not '{o.backend}'", "drop the backend option")
    if o.from_torch:
        raise UsageError(f"{where} takes an ONNX model", "export it first: edgeopt convert --from-torch ... --dry-run "
                         "shows the plan; tune the exported .onnx")
    return o


def tune_plan(profile, options: ConvertOptions | None = None, **keywords):
    """The :class:`edgeopt.plan.Plan` ``tune`` runs: the one ``convert`` makes with the tuned backend and the
    same options (``options`` or the same fields as keywords; recipe, prune, data and metric included)."""
    from edgeopt.plan import make_plan
    from edgeopt.profiles import DeviceProfile, load_profile

    o = _options(options, keywords, "tune")
    prof = profile if isinstance(profile, DeviceProfile) else load_profile(str(profile), o.profile_dirs or None)
    request = o.chain_request().model_copy(update={"backend": tuned_backend()[0].value})
    return make_plan(prof, request, recipe=o.recipe, input_shapes=dict(o.input_shapes))


def backend_input(model, plan, options: ConvertOptions, *, work_dir: Path, warn=None):
    """The ONNX proto the tuned backend sees: ``plan``'s stages before the backend, on ``options``' data."""

    from edgeopt.chain import check_samples, execute, load_datasets
    from edgeopt.converters.base import ChainContext, Intermediate
    from edgeopt.data import parse_preprocess
    from edgeopt.model import fix_input_shapes, graph_inputs, load_onnx

    src = Path(model)
    proto = fix_input_shapes(load_onnx(src), dict(options.input_shapes), origin=src.name)

    def data_warn(message: str) -> None:  # tune validates nothing: only calibration warnings matter
        if warn and not message.startswith("validation"):
            warn(message)

    calib, val, val_source = load_datasets(graph_inputs(proto), options.calib, options.eval,
                                           parse_preprocess(options.preprocess), plan.precision, data_warn)
    ctx = ChainContext(work_dir=work_dir, artifact_dir=work_dir / "unused", reference_model=src, calib=calib,
                       eval=val if val_source == "eval" else None, check_samples=check_samples(val),
                       threads=plan.options.threads,
                       metric_search_path=options.metric_dirs())
    inter, _ = execute(plan, Intermediate(src), ctx, stop_before=plan.backend.value, on_warning=warn)
    return load_onnx(inter.path, check=False)


def _check_budget(trials: int | None, time_budget_min: float | None) -> None:
    if trials is None and time_budget_min is None:
        raise UsageError("give --trials N or --time-budget MIN", "e.g. --trials 64 (~10 s a trial on 2 cores)")
    if trials is not None and trials < 1:
        raise UsageError(f"--trials {trials} must be at least 1")
    if time_budget_min is not None and time_budget_min <= 0:
        raise UsageError(f"--time-budget {time_budget_min} must be positive (minutes)")


def tune(model, profile, options: ConvertOptions | None = None, *, trials: int | None = None,
         time_budget_min: float | None = None, tuning_db: str | Path | None = None, rpc_tracker: str | None = None,
         rpc_key: str | None = None, trials_per_iter: int = 16, progress=None, on_warning=None, seed: int = 0,
         **keywords) -> TuneResult:
    """Tune ``model``'s kernels for ``profile`` with the tuned backend's search (see the module doc). ``options``:
    what ``convert`` takes (:class:`edgeopt.options.ConvertOptions`), or the same fields as keywords."""
    from edgeopt.deps import require

    _check_budget(trials, time_budget_min)
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning:
            on_warning(message)

    o = _options(options, keywords, "tune")
    plan = tune_plan(profile, o)
    for w in plan.warnings:
        warn(w)
    backend, hooks = tuned_backend()
    for module in hooks.tune_requires:
        require(module, f"{backend.value} tuning")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edgeopt-tune-") as work:
        proto = backend_input(model, plan, o, work_dir=Path(work), warn=warn)
    facts = hooks.tune(proto, plan.stages[-1].config, tuning_db, trials=trials, time_budget_min=time_budget_min,
                       rpc_tracker=rpc_tracker, rpc_key=rpc_key, trials_per_iter=trials_per_iter, progress=progress,
                       warn=warn, seed=seed)
    return TuneResult(
        model=str(model), profile=plan.profile, precision=plan.precision.value, plan_hash=plan.hash,
        trials_requested=trials, time_budget_min=time_budget_min, seconds=round(time.perf_counter() - t_start, 1),
        warnings=warnings, **facts,
    )
