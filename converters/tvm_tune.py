"""MetaSchedule tuning for the TVM backend (``edgeopt tune``), saved in a reusable JSON database.

The model goes through the same chain stages ``convert`` runs before the TVM backend (normalize,
prune, quantize, from the same profile and precision), so the database's content-hash key
(backend-input graph bytes + resolved target, :func:`tvm_build.tuning_key`) is the one ``convert``
computes and finds again in ``$EDGEOPT_CACHE_DIR/tvm-tuning/<key>``; ``--tuning-db DIR`` puts it elsewhere
(then a recipe's ``stages: {tvm: {tuning_db: DIR}}`` applies it).

Measurements: locally for a target of this machine's architecture, or on a board through TVM's
RPC tracker (``RPCRunner``; builds are then cross-compiled here). MetaSchedule appends every
measured record to the database files as it goes, so an interrupted run (Ctrl-C) or one stopped by
its time budget keeps what it has measured.

Build workers import ``tvm.s_tir.tensor_intrin`` (~27 s on 2 idle cores, 90 s on a loaded one) and
MetaSchedule's ``LocalBuilder`` starts a fresh pool for every batch; the builder here keeps one worker
for the whole run, imports that module in its initializer (outside the build timeout, and 3x faster:
:func:`tvm_build.import_tensor_intrin`), and is where a Ctrl-C or a spent ``--time-budget`` ends the run.
xgboost (MetaSchedule's learned cost model) is optional; without it the search uses the random model.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from edgeopt.converters.backends import tvm_build as tb
from edgeopt.deps import require
from edgeopt.enums import BackendName
from edgeopt.errors import BadInputError, StageError, UsageError

BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120
RPC_SESSION_TIMEOUT_S = 120


class TuneResult(BaseModel):
    model: str
    profile: str
    precision: str
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


def _worker_init() -> None:
    """Builder/runner worker initializer: the slow import, outside the per-build timeout.

    Workers ignore SIGINT: a Ctrl-C at the terminal reaches the whole process group, and the main
    process stops the run cleanly itself (see :func:`_sigint_stops_tuning`).
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tb.import_tensor_intrin()


@contextlib.contextmanager
def _sigint_stops_tuning(stats: dict):
    """First Ctrl-C: the builder ends the run before its next batch (:class:`TuningStopped`), the database
    intact. A KeyboardInterrupt raised while TVM's C++ task scheduler runs crashed the process (SIGSEGV
    seen here). Second Ctrl-C: KeyboardInterrupt."""
    import signal
    import threading

    def handler(signum, frame):
        if stats["interrupt"]:
            raise KeyboardInterrupt
        stats["interrupt"] = True
        sys.stderr.write("edgeopt: interrupted: stopping before the next batch; the database keeps every "
                         "record so far (Ctrl-C again to abort now)\n")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _export_cross(compiler: str, rt_mod) -> str:
    """MetaSchedule build export for a foreign target: cross-compile the candidate library."""
    import os

    from tvm.support import cc

    path = os.path.join(tempfile.mkdtemp(prefix="edgeopt-ms-"), "tvm_tmp_mod.so")
    rt_mod.export_library(path, fcompile=cc.cross_compiler(compiler))
    return path


class TuningStopped(Exception):
    """Raised by the builder to end MetaSchedule's C++ loop early (Ctrl-C or time budget).

    Stopping tasks with ``TaskScheduler.terminate_task`` from a measure callback trips the
    scheduler's ``!task->is_terminated`` check, and a KeyboardInterrupt crossing TVM's C++ frames
    crashed the process; a plain exception from the builder unwinds the loop cleanly. Just before it,
    ``should_stop`` joins the batches already sent to the runner, so their records reach the database.
    """


def _pool_builder(timeout_s: float, f_export, should_stop):
    """A MetaSchedule builder that keeps one worker process for the whole run.

    ``LocalBuilder`` makes a new pool (and pays the ~27 s worker import) for every batch; this one
    does the same build in a pool made once, with the same worker function. Before each batch it
    asks ``should_stop()`` and ends the run with :class:`TuningStopped` when told to.
    """
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder import local_builder as lb
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    @derived_object
    class _PoolBuilder(PyBuilder):
        def __init__(self) -> None:
            super().__init__()
            self.pool = PopenPoolExecutor(max_workers=1, timeout=timeout_s, initializer=_worker_init)

        def build(self, build_inputs):
            if should_stop():
                raise TuningStopped("tuning stopped")  # after joining what is in flight (see tune)
            args = [(None, f_export, b.mod, b.target, lb._serialize_params(b.params)) for b in build_inputs]
            results = []
            for r in self.pool.map_with_error_catching(lambda x: lb._worker_func(*x), args):
                if r.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(r.value, None))
                elif r.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(None, f"build timed out after {timeout_s} s"))
                else:
                    results.append(BuilderResult(None, f"build failed: {r.value}"))
            return results

        def shutdown(self) -> None:
            self.pool.shutdown()

    return _PoolBuilder()


def backend_input(model, profile, *, precision=None, calib=None, input_shapes=None, work_dir: Path,
                  warn=None):
    """(ONNX proto the TVM backend would see, the plan) — the chain's stages before the backend."""
    from edgeopt.chain import check_samples, execute, load_datasets
    from edgeopt.converters.base import ChainContext, Intermediate
    from edgeopt.model import fix_input_shapes, graph_inputs, load_onnx, parse_input_shapes
    from edgeopt.plan import make_plan

    shapes = input_shapes if isinstance(input_shapes, dict) else parse_input_shapes(input_shapes)
    plan = make_plan(profile, backend=BackendName.TVM.value, precision=precision, input_shapes=shapes)
    src = Path(model)
    proto = fix_input_shapes(load_onnx(src), shapes, origin=src.name)
    specs = graph_inputs(proto)
    def data_warn(message: str) -> None:  # tune validates nothing: only calibration warnings matter
        if warn and not message.startswith("validation"):
            warn(message)

    calib_ds, val, _ = load_datasets(specs, calib, None, None, plan.precision, data_warn)
    ctx = ChainContext(work_dir=work_dir, artifact_dir=work_dir / "unused", reference_model=src,
                       calib=calib_ds, check_samples=check_samples(val),
                       threads=plan.options.threads)
    inter, _ = execute(plan, Intermediate(src), ctx, stop_before=plan.backend.value, on_warning=warn)
    return load_onnx(inter.path, check=False), plan


def _parse_tracker(tracker: str) -> tuple[str, int]:
    host, _, port = tracker.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--rpc-tracker '{tracker}' is not HOST:PORT", "e.g. --rpc-tracker 127.0.0.1:9190")
    return host, int(port)


def _runner(target_dict: dict, rpc_tracker: str | None, rpc_key: str | None, evaluator):
    from tvm.s_tir import meta_schedule as ms

    if rpc_tracker:
        if not rpc_key:
            raise UsageError("--rpc-tracker needs --rpc-key", "the key the board's rpc_server registered with")
        host, port = _parse_tracker(rpc_tracker)
        config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=rpc_key,
                                     session_timeout_sec=RPC_SESSION_TIMEOUT_S)
        return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, max_workers=1,
                                   initializer=_worker_init), \
            f"rpc {host}:{port} key {rpc_key}"
    if tb.is_cross(target_dict) or tb.device_kind(target_dict) != "cpu":
        raise UsageError(f"the target ({tb.target_arch(target_dict)}, {tb.device_kind(target_dict)}) is not this "
                         "machine: tuning must measure on the device",
                         "give --rpc-tracker HOST:PORT --rpc-key KEY of the board's TVM RPC server")
    return ms.runner.LocalRunner(timeout_sec=RUN_TIMEOUT_S, evaluator_config=evaluator, initializer=_worker_init), "local"


def _progress_callback(tick, stats: dict):
    """A MetaSchedule measure callback: counts trials (and failures), keeps the best latency, advances the bar."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            name = stats["names"][task_id]
            for b, r in zip(builder_results, runner_results, strict=False):
                secs = [float(s) for s in (r.run_secs or [])]
                if b.error_msg or r.error_msg or not secs:
                    stats["failed"] += 1
                    stats.setdefault("first_error", (b.error_msg or r.error_msg or "")[:300])
                else:
                    ms_ = 1000.0 * sum(secs) / len(secs)
                    stats["best"][name] = min(stats["best"].get(name, ms_), ms_)
            stats["measured"] += len(runner_results)
            if tick is not None:
                tick.advance(len(runner_results))

    return _Progress()


def tune(model, profile, *, trials: int | None = None, time_budget_min: float | None = None,
         tuning_db: str | Path | None = None, rpc_tracker: str | None = None, rpc_key: str | None = None,
         precision=None, calib=None, input_shapes=None, trials_per_iter: int = 16, profile_dirs=None,
         progress=None, on_warning=None, seed: int = 0) -> TuneResult:
    """Tune ``model`` for ``profile``'s TVM target with MetaSchedule; see the module doc."""
    from edgeopt.profiles import DeviceProfile, load_profile

    if trials is None and time_budget_min is None:
        raise UsageError("give --trials N or --time-budget MIN", "e.g. --trials 64 (~10 s a trial on 2 cores)")
    if trials is not None and trials < 1:
        raise UsageError(f"--trials {trials} must be at least 1")
    if time_budget_min is not None and time_budget_min <= 0:
        raise UsageError(f"--time-budget {time_budget_min} must be positive (minutes)")
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning:
            on_warning(message)

    prof = profile if isinstance(profile, DeviceProfile) else load_profile(str(profile), profile_dirs)
    require("tvm", "MetaSchedule tuning")
    require("psutil", "MetaSchedule tuning")
    from tvm.s_tir import meta_schedule as ms

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edgeopt-tune-") as work:
        proto, plan = backend_input(model, prof, precision=precision, calib=calib, input_shapes=input_shapes,
                                    work_dir=Path(work), warn=warn)
    tvm_config = plan.stages[-1].config
    target_dict = tb.resolve_target(tvm_config.target)
    compiler = tb.cross_compiler_for(target_dict)
    target = tb.make_target(target_dict)
    key = tb.tuning_key(proto, target_dict)
    db_dir = Path(tuning_db).expanduser() if tuning_db else tb.tuning_dir(key)

    mod = tb.import_onnx(proto)
    extracted = ms.relax_integration.extract_tasks(tb.fused_module(mod, target), target)
    if not extracted:
        raise BadInputError("tvm: the model has no operators to tune", "convert it untuned")
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=50, enable_cpu_cache_flush=False)
    runner, runner_name = _runner(target_dict, rpc_tracker, rpc_key, evaluator)
    budget_s = time_budget_min * 60 if time_budget_min else None
    t_tune = time.perf_counter()

    scheduler = ms.task_scheduler.TaskScheduler.create("gradient")

    def should_stop() -> bool:
        if stats["interrupt"] or (budget_s is not None and time.perf_counter() - t_tune > budget_s):
            if not stats["stopped"]:  # measure what was built and sent to the runner: its records then count
                for i in range(len(stats["names"])):
                    with contextlib.suppress(Exception):  # tasks with nothing in flight raise a check error
                        scheduler.join_running_task(i)
            stats["stopped"] = True
        return stats["stopped"]

    builder = _pool_builder(BUILD_TIMEOUT_S, functools.partial(_export_cross, compiler) if compiler else None,
                            should_stop)
    database = tb.open_database(db_dir)
    tb.import_tensor_intrin()  # TuneContext imports it; this way it takes a third of the time
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    ms_logger.setLevel(logging.WARNING)  # its console handler takes this level; the full log goes to DB/logs
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted, str(db_dir), num_threads=os.cpu_count() or 1, seed=seed)  # search threads, here
    for handler in ms_logger.handlers:  # MetaSchedule logs to stdout, which belongs to --json
        if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is sys.stdout:
            handler.setStream(sys.stderr)
    names = [c.task_name for c in contexts]
    # With a time budget and no trial count, allow many trials; the budget stops the run.
    total = trials if trials is not None else 64 * len(contexts)
    cost_model = "xgb" if importlib.util.find_spec("xgboost") is not None else "random"
    if cost_model == "random":
        warn("tvm: xgboost is not installed: MetaSchedule searches with a random cost model (slower to converge); "
             "pip install xgboost for the learned one (it pulls a ~470 MB NCCL wheel)")
    # a batch per task at least: a small budget is spread over every task, not spent on the first few
    per_iter = max(1, min(trials_per_iter, total // len(contexts) if total >= len(contexts) else total))
    stats = {"names": names, "measured": 0, "failed": 0, "best": {}, "stopped": False, "interrupt": False}
    stopped_by = "trials"
    bar = progress(f"tuning {len(names)} tasks", total) if progress else contextlib.nullcontext()
    with bar as tick:
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"),
                     _progress_callback(tick, stats)]
        with _sigint_stops_tuning(stats):
            try:
                ms.tune.tune_tasks(tasks=contexts, task_weights=weights, work_dir=str(db_dir), max_trials_global=total,
                                   num_trials_per_iter=per_iter, builder=builder, runner=runner,
                                   database=database, measure_callbacks=callbacks, cost_model=cost_model,
                                   task_scheduler=scheduler)
            except KeyboardInterrupt:
                stopped_by = "interrupted"
            except Exception as err:  # noqa: BLE001 - a TVM failure becomes one line; the database keeps its records
                if not stats["stopped"]:  # else: our TuningStopped, as it comes back through TVM's C++ loop
                    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
                    raise StageError(f"tvm: MetaSchedule tuning failed: {type(err).__name__}: {first}",
                                     f"the database {db_dir} keeps the {tb.database_records(db_dir)} records measured "
                                     "so far; rerun with --debug for the traceback") from err
            finally:
                builder.shutdown()
    if stats["interrupt"]:
        stopped_by = "interrupted"
    elif stats["stopped"]:
        stopped_by = "time-budget"
    if stats["failed"]:
        warn(f"tvm: {stats['failed']} of {stats['measured']} candidates failed to build or run "
             f"(first: {stats.get('first_error', '').splitlines()[0] if stats.get('first_error') else '?'})")
    return TuneResult(
        model=str(model), profile=prof.name, precision=plan.precision.value, target=target_dict, key=key,
        database=str(db_dir), runner=runner_name, tasks=names, trials_requested=trials,
        time_budget_min=time_budget_min, trials_measured=stats["measured"], trials_failed=stats["failed"],
        records=tb.database_records(db_dir), seconds=round(time.perf_counter() - t_start, 1), stopped_by=stopped_by,
        best_ms={k: round(v, 4) for k, v in stats["best"].items()}, cost_model=cost_model, warnings=warnings,
    )
