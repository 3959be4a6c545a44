"""The prune stage's quick timing of the pruned model against the unpruned one, on the plan's backend where it
runs an ONNX file here, else on ONNX Runtime: an estimate, reported (and a warning when pruning is not faster)."""

from __future__ import annotations

from pathlib import Path

from edgeopt.converters.base import ChainContext
from edgeopt.runtime.reference import REFERENCE, REFERENCE_RUNTIME


def latency_vs_unpruned(before: Path, after: Path, ctx: ChainContext, repeats: int = 60,
                        backend: str = REFERENCE) -> dict:
    """The pruned model against the unpruned one, interleaved, on the plan's backend where it runs an ONNX file
    here (ONNX Runtime; OpenVINO CPU at f32 when installed), else on ONNX Runtime with a note: a quick estimate.
    A prune that is not faster says so (a warning)."""
    from edgeopt.runtime.quick_timing import interleaved_latency_ms

    feed = ctx.check_samples.feed(0) if ctx.check_samples is not None and len(ctx.check_samples) else random_feed(before)
    run_fn, runtime, note = _timing_runtime(backend, ctx.threads)
    runs = {"unpruned": run_fn(before), "pruned": run_fn(after)}
    lat = interleaved_latency_ms(runs, feed, repeats=repeats)
    speedup = round(lat["unpruned"] / lat["pruned"], 3) if lat["pruned"] > 0 else None
    entry = {"latency_ms": lat, "speedup": speedup, "runs_each": repeats, "threads": ctx.threads,
             "runtime": runtime, "backend": backend,
             "note": "quick p50 on bench's clock before the artifact was written: an estimate, not a benchmark "
                     "(edgeopt bench measures the artifact)" + (f"; {note}" if note else "")}
    if speedup is not None and speedup < 1.05:
        entry["warning"] = (f"prune: the pruned model is not faster than the unpruned one on {runtime} "
                            f"({lat['pruned']:.3g} ms vs {lat['unpruned']:.3g} ms, x{speedup:g}; quick estimate)")
        ctx.warn(entry["warning"])
    return entry


def _timing_runtime(backend: str, threads: int | None):
    """(path -> run function, what runs it, a note when it is not the plan's backend)."""
    from edgeopt.runtime.run_fn import run_fn

    here = f"{REFERENCE_RUNTIME} on this machine"
    if backend == REFERENCE:
        return (lambda p: run_fn(p, threads)), here, None
    timer = _backend_timer(backend)
    made = timer(threads) if timer is not None else None
    if made is not None:
        return (*made, None)
    return ((lambda p: run_fn(p, threads)), here,
            f"the plan's backend {backend} is timed only after conversion (edgeopt bench): ONNX Runtime stands in")


def _backend_timer(backend: str):
    """The function the backend's class names in ``onnx_timer``, or None (an unknown backend has none)."""
    from edgeopt.converters.registry import get_backend, resolve

    try:
        ref = get_backend(backend).onnx_timer
    except Exception:  # noqa: BLE001 - a backend the registry doesn't know is timed by ONNX Runtime
        return None
    return resolve(ref) if ref else None


def random_feed(path: Path) -> dict:
    import numpy as np

    from edgeopt.model import graph_inputs, load_onnx

    rng = np.random.default_rng(0)
    feed = {}
    for spec in graph_inputs(load_onnx(path, check=False)):
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in spec.shape]
        feed[spec.name] = rng.random(shape).astype(spec.dtype if spec.dtype != "float64" else "float32")
    return feed
