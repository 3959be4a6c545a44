"""MetaSchedule tuning of the TVM backend's input graph, saved in a reusable JSON database.

:func:`tune_database` tunes one ONNX graph (the one the TVM backend sees: ``edgeopt tune``, in
:mod:`edgeopt.tune`, runs the plan's stages before the backend to make it) for one resolved target and
appends the records to ``db_dir``. The cache's databases are named by :func:`.build.tuning_key`
(backend-input graph bytes + resolved target), the key ``convert`` computes to find them again.

Measurements: locally for a target of this machine's architecture, or on a board through TVM's
RPC tracker (``RPCRunner``; builds are then cross-compiled here). MetaSchedule appends every
measured record to the database files as it goes, so an interrupted run (Ctrl-C) or one stopped by
its time budget keeps what it has measured.

Build workers import ``tvm.s_tir.tensor_intrin`` (~27 s on 2 idle cores, 90 s on a loaded one) and
MetaSchedule's ``LocalBuilder`` starts a fresh pool for every batch; the builder here keeps one worker
for the whole run, imports that module in its initializer (outside the build timeout, and 3x faster:
:func:`.build.import_tensor_intrin`), and is where a Ctrl-C or a spent time budget ends the run.
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
from dataclasses import dataclass, field
from pathlib import Path

from edgeopt.converters.backends.tvm import build as tb
from edgeopt.deps import require
from edgeopt.errors import BadInputError, StageError, UsageError

BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120
RPC_SESSION_TIMEOUT_S = 120


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




@dataclass
class TuningRun:
    """What one MetaSchedule run did."""

    runner: str  # "local" or "rpc <host:port> key <key>"
    tasks: list[str]
    trials_measured: int = 0
    trials_failed: int = 0
    stopped_by: str = "trials"  # "trials", "time-budget" or "interrupted"
    cost_model: str = "xgb"  # "xgb" when xgboost is installed, else "random" (MetaSchedule's built-ins)
    best_ms: dict[str, float] = field(default_factory=dict)  # task name -> best measured latency (ms)


def _tune_contexts(proto, target, db_dir: Path, seed: int):
    """MetaSchedule's tune contexts (and task weights) of the graph's tasks; its console log goes to stderr."""
    from tvm.s_tir import meta_schedule as ms

    extracted = ms.relax_integration.extract_tasks(tb.fused_module(tb.import_onnx(proto), target), target)
    if not extracted:
        raise BadInputError("tvm: the model has no operators to tune", "convert it untuned")
    tb.import_tensor_intrin()  # TuneContext imports it; this way it takes a third of the time
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    ms_logger.setLevel(logging.WARNING)  # its console handler takes this level; the full log goes to DB/logs
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted, str(db_dir), num_threads=os.cpu_count() or 1, seed=seed)  # search threads, here
    for handler in ms_logger.handlers:  # MetaSchedule logs to stdout, which belongs to --json
        if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is sys.stdout:
            handler.setStream(sys.stderr)
    return contexts, weights


def _cost_model(warn) -> str:
    if importlib.util.find_spec("xgboost") is not None:
        return "xgb"
    warn("tvm: xgboost is not installed: MetaSchedule searches with a random cost model (slower to converge); "
         "pip install xgboost for the learned one (it pulls a ~470 MB NCCL wheel)")
    return "random"


def _stopper(stats: dict, scheduler, budget_s: float | None):
    """``should_stop()`` for the builder: a Ctrl-C or a spent budget, after joining the batches in flight."""
    t_tune = time.perf_counter()

    def should_stop() -> bool:
        if stats["interrupt"] or (budget_s is not None and time.perf_counter() - t_tune > budget_s):
            if not stats["stopped"]:  # measure what was built and sent to the runner: its records then count
                for i in range(len(stats["names"])):
                    with contextlib.suppress(Exception):  # tasks with nothing in flight raise a check error
                        scheduler.join_running_task(i)
            stats["stopped"] = True
        return stats["stopped"]

    return should_stop


def _run_tasks(ms, contexts, weights, db_dir: Path, total: int, per_iter: int, builder, runner, scheduler,
               stats: dict, cost_model: str, progress) -> str:
    """MetaSchedule's search over every task; how it stopped (``trials``, ``time-budget``, ``interrupted``)."""
    stopped_by = "trials"
    bar = progress(f"tuning {len(contexts)} tasks", total) if progress else contextlib.nullcontext()
    with bar as tick, _sigint_stops_tuning(stats):
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _progress_callback(tick, stats)]
        try:
            ms.tune.tune_tasks(tasks=contexts, task_weights=weights, work_dir=str(db_dir), max_trials_global=total,
                               num_trials_per_iter=per_iter, builder=builder, runner=runner,
                               database=tb.open_database(db_dir), measure_callbacks=callbacks,
                               cost_model=cost_model, task_scheduler=scheduler)
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
        return "interrupted"
    return "time-budget" if stats["stopped"] else stopped_by


def tune_database(proto, target_dict: dict, db_dir: Path, *, trials: int | None, time_budget_min: float | None,
                  rpc_tracker: str | None = None, rpc_key: str | None = None, trials_per_iter: int = 16,
                  progress=None, warn=None, seed: int = 0) -> TuningRun:
    """Tune ``proto``'s tasks for ``target_dict`` (resolved) into the JSON database ``db_dir``; see the module doc."""
    require("tvm", "MetaSchedule tuning")
    require("psutil", "MetaSchedule tuning")
    from tvm.s_tir import meta_schedule as ms

    warn = warn or (lambda message: None)
    compiler = tb.cross_compiler_for(target_dict)
    target = tb.make_target(target_dict)
    evaluator = ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=50, enable_cpu_cache_flush=False)
    runner, runner_name = _runner(target_dict, rpc_tracker, rpc_key, evaluator)
    stats = {"names": [], "measured": 0, "failed": 0, "best": {}, "stopped": False, "interrupt": False}
    scheduler = ms.task_scheduler.TaskScheduler.create("gradient")
    should_stop = _stopper(stats, scheduler, time_budget_min * 60 if time_budget_min else None)  # the clock starts
    contexts, weights = _tune_contexts(proto, target, db_dir, seed)
    names = stats["names"] = [c.task_name for c in contexts]
    # With a time budget and no trial count, allow many trials; the budget stops the run.
    total = trials if trials is not None else 64 * len(contexts)
    cost_model = _cost_model(warn)
    # a batch per task at least: a small budget is spread over every task, not spent on the first few
    per_iter = max(1, min(trials_per_iter, total // len(contexts) if total >= len(contexts) else total))
    builder = _pool_builder(BUILD_TIMEOUT_S, functools.partial(_export_cross, compiler) if compiler else None,
                            should_stop)
    stopped_by = _run_tasks(ms, contexts, weights, db_dir, total, per_iter, builder, runner, scheduler, stats,
                            cost_model, progress)
    if stats["failed"]:
        first = stats.get("first_error", "").splitlines()[0] if stats.get("first_error") else "?"
        warn(f"tvm: {stats['failed']} of {stats['measured']} candidates failed to build or run (first: {first})")
    return TuningRun(runner=runner_name, tasks=names, trials_measured=stats["measured"], trials_failed=stats["failed"],
                     stopped_by=stopped_by, cost_model=cost_model,
                     best_ms={k: round(v, 4) for k, v in stats["best"].items()})
