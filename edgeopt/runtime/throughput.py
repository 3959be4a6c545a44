"""Throughput beyond one stream: parallel streams and batching (shipped to devices: stdlib + numpy).

Single-stream throughput (one request at a time) comes with every latency measurement. These two
answer "how many queries a second can this device serve", measured after the latency runs:

- **parallel streams**: ``streams`` requests in flight at once. A backend with its own way to do
  this uses it (OpenVINO: ``PERFORMANCE_HINT=THROUGHPUT`` and an ``AsyncInferQueue``, what
  ``benchmark_app -api async`` measures). Any other backend gets one runner per stream, each on
  ``threads // streams`` threads, called from its own Python thread (the runtimes release the GIL
  while they compute; one that does not shows no gain, which is then the honest figure);
- **batching**: one stream at batch ``B``, for an artifact whose inputs have a symbolic batch
  dimension; a static batch is reported as unsupported with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from .measure import cores_available

AUTO = "auto"


def _median_ms(samples: list[float]) -> float | None:
    return round(float(np.median(samples)) * 1e3, 6) if samples else None


def parallel_streams(open_one: Callable[[int], object], feeds: dict, *, streams: int, threads: int | None,
                     seconds: float, warmup: int = 3) -> dict:
    """``streams`` runners from ``open_one(threads_per_stream)``, each looping ``run(feeds)`` in
    its own thread for ``seconds``; queries a second over all of them."""
    if streams < 1:
        raise ValueError("streams must be >= 1")
    per = max(1, (threads or cores_available()) // streams)
    runners = []
    try:
        for _ in range(streams):
            runners.append(open_one(per))
        for r in runners:
            for _ in range(max(warmup, 1)):
                r.run(feeds)
        latencies: list[list[float]] = [[] for _ in runners]
        errors: list[BaseException] = []
        start, stop = threading.Barrier(streams + 1), threading.Event()

        def work(i: int) -> None:
            start.wait()
            try:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    runners[i].run(feeds)
                    latencies[i].append(time.perf_counter() - t0)
            except BaseException as err:  # noqa: BLE001 - reported by the caller's thread
                errors.append(err)

        workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(streams)]
        for w in workers:
            w.start()
        start.wait()
        t0 = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
        if errors:
            raise errors[0]
    finally:
        for r in runners:
            close = getattr(r, "close", None)
            if close:
                close()
    runs = sum(len(x) for x in latencies)
    return {"mode": "parallel_streams", "streams": streams, "threads_per_stream": per, "runs": runs,
            "seconds": round(elapsed, 4), "throughput_qps": round(runs / elapsed, 3) if elapsed > 0 else None,
            "latency_ms_p50_under_load": _median_ms([x for lat in latencies for x in lat]),
            "runs_per_stream": [len(x) for x in latencies]}


def batch_dimension_is_free(inputs: list[dict]) -> bool:
    """True when every input's first dimension is symbolic (a name, None or <= 0) in the manifest."""
    firsts = [(spec.get("shape") or [1])[0] for spec in inputs]
    return bool(firsts) and all(not isinstance(d, int) or d <= 0 for d in firsts)


def batched(runner, feeds: dict, inputs: list[dict], *, batch: int, seconds: float, warmup: int = 3) -> dict:
    """One stream at batch ``batch`` (each input repeated along axis 0): queries a second = batch x runs / s."""
    base = {"mode": "batched", "batch": batch}
    if not batch_dimension_is_free(inputs):
        return {**base, "supported": False,
                "reason": "the artifact's inputs have a static batch dimension (export the model with a symbolic "
                          "batch dimension to measure batching; --streams measures parallel requests instead)"}
    big = {k: np.ascontiguousarray(np.repeat(np.asarray(v), batch, axis=0)) for k, v in feeds.items()}
    try:
        for _ in range(max(warmup, 1)):
            runner.run(big)
    except Exception as err:  # noqa: BLE001 - the runtime compiled a static batch after all
        return {**base, "supported": False,
                "reason": f"the runtime refused batch {batch}: {type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"}
    samples = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(samples) < 3:
        t0 = time.perf_counter()
        runner.run(big)
        samples.append(time.perf_counter() - t0)
    total = sum(samples)
    return {**base, "supported": True, "runs": len(samples), "seconds": round(total, 4),
            "throughput_qps": round(batch * len(samples) / total, 3) if total > 0 else None,
            "latency_ms_p50_per_batch": _median_ms(samples)}


def parse_streams(value: str | int | None) -> int | str | None:
    """``--streams``: a count >= 1, ``auto`` (the backend's choice, else one a core), or 0/None (off)."""
    if value in (None, "", 0, "0"):
        return None
    if str(value).lower() == AUTO:
        return AUTO
    n = int(value)  # ValueError for anything else
    if n < 1:
        raise ValueError(f"streams must be >= 1 or 'auto', not {value}")
    return n


def throughput_asked(streams: int | str | None, batch: int | None) -> bool:
    """Whether a measurement beyond single-stream was asked for (a batch of 1 is single-stream)."""
    return bool(streams) or (batch or 0) > 1


def throughput_seconds(asked: float | None, min_seconds: float) -> float:
    """Seconds for each throughput measurement: as asked, else the latency's minimum, at least 1 s."""
    return asked if asked is not None else max(min_seconds, 1.0)


def measure_throughput(runner, open_one: Callable[[int], object], feeds: dict, inputs: list[dict], *,
                       streams: int | str | None, batch: int | None, threads: int | None, seconds: float,
                       single_stream_qps: float | None) -> dict:
    """The ``throughput`` block of a result: single stream, plus parallel streams and/or batching
    when asked. ``runner`` is the already-open runner (for batching and a backend's own
    multi-stream mode); ``open_one(threads)`` opens another copy of it."""
    out: dict = {"single_stream_qps": single_stream_qps, "parallel": None, "batched": None}
    if streams:
        auto = streams == AUTO
        native = getattr(runner, "parallel_throughput", None)
        try:
            par = native(feeds, streams=None if auto else int(streams), seconds=seconds) if native else None
            if par is None:
                n = (threads or cores_available()) if auto else int(streams)
                par = parallel_streams(open_one, feeds, streams=n, threads=threads, seconds=seconds)
        except Exception as err:  # noqa: BLE001 - the latency result stands; this part says what failed
            par = {"mode": "parallel", "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
        out["parallel"] = par
    if batch and batch > 1:
        out["batched"] = batched(runner, feeds, inputs, batch=batch, seconds=seconds)
    for key in ("parallel", "batched"):
        b = out[key]
        if b and b.get("throughput_qps") and single_stream_qps:
            b["speedup_vs_single_stream"] = round(b["throughput_qps"] / single_stream_qps, 3)
    return out
