"""The measurement core: warm-up, then timed runs until a minimum count AND a minimum duration.

Shipped to devices with the rest of ``edgeopt/runtime`` (standard library + numpy only,
relative imports only). The same code measures locally, under emulation and on a remote
device, so figures from the three places are comparable.

``measure(run_once)`` times one callable; ``measure_interleaved([f, g, ...])`` times several
in round-robin blocks so that they share the machine's noise (background load, clock changes).
Both stop for a callable when it has ``min_runs`` runs AND ``min_seconds`` of timed runs (the
MLPerf rule), or at ``max_runs`` / ``max_seconds`` as a safety net; the rule that stopped it is
recorded. Latencies are kept per run, in milliseconds.
"""

from __future__ import annotations

import math
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

SCHEMA_VERSION = 1
WARMUP = 10  # warm-up calls of each callable (bench's default, and convert's quick timing's)
BLOCK_SECONDS = 0.25  # one callable's block of timed calls before the next takes its turn


class StopRule:
    """Why a measurement stopped (plain strings: this module has no edgeopt imports)."""

    MIN_RUNS_AND_SECONDS = "min_runs_and_min_seconds"
    MAX_RUNS = "max_runs"
    MAX_SECONDS = "max_seconds"


# --------------------------------------------------------------------------- statistics


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """1-based order-statistic ranks ``(l, u)`` with P(X(l) <= median <= X(u)) >= confidence.

    Distribution-free: the number of samples below the true median is Binomial(n, 1/2), so
    the coverage of ``[X(l), X(u)]`` is ``P(l <= B <= u - 1)``. Returns the achieved coverage
    too; for tiny ``n`` (< 6 at 95 %) no such pair exists and ``(1, n)`` is returned with the
    coverage it really has.
    """
    if n < 1:
        raise ValueError("no samples")
    alpha = 1.0 - confidence
    log_half_n = -n * math.log(2.0)
    lg_n1 = math.lgamma(n + 1)
    cdf = 0.0
    lower = 0  # largest l with P(B <= l - 1) <= alpha / 2
    for k in range(n + 1):
        cdf += math.exp(lg_n1 - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n)
        if cdf <= alpha / 2 + 1e-12:
            lower = k + 1
        else:
            break
    if lower < 1:
        lower = 1
    upper = n + 1 - lower
    tail = sum(
        math.exp(lg_n1 - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n) for k in range(lower)
    )
    return lower, upper, max(0.0, 1.0 - 2.0 * tail)


def latency_stats(samples_ms: Sequence[float], confidence: float = 0.95) -> dict:
    """Percentiles (numpy's linear interpolation), mean, std (n-1), min, max and the median's CI."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no samples")
    s = np.sort(a)
    lo, hi, coverage = median_ci_ranks(int(s.size), confidence)
    p50, p90, p99 = np.percentile(s, [50, 90, 99])
    return {
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "mean": float(s.mean()),
        "std": float(s.std(ddof=1)) if s.size > 1 else 0.0,
        "min": float(s[0]),
        "max": float(s[-1]),
        "ci95_low": float(s[lo - 1]),
        "ci95_high": float(s[hi - 1]),
        "ci_coverage": round(coverage, 4),
        "n": int(s.size),
    }


# --------------------------------------------------------------------------- the loop


def cores_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes
    return round(rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024, 1)


class _Track:
    def __init__(self, fn: Callable[[], object]):
        self.fn = fn
        self.samples: list[float] = []
        self.timed_s = 0.0
        self.cpu_s = 0.0
        self.first_ms: float | None = None
        self.stop_rule: str | None = None


def measure_interleaved(
    run_fns: Sequence[Callable[[], object]],
    *,
    warmup: int = WARMUP,
    min_runs: int = 50,
    min_seconds: float = 2.0,
    max_runs: int = 100_000,
    max_seconds: float = 600.0,
    block_seconds: float = BLOCK_SECONDS,
    progress: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
) -> list[dict]:
    """Measure several callables in round-robin blocks; one result dict per callable.

    ``max_seconds`` bounds the whole measurement (all callables together); ``min_seconds`` is
    each callable's own timed time. A block runs one callable for about ``block_seconds``.
    """
    if min_runs < 1 or max_runs < 1:
        raise ValueError("min_runs and max_runs must be >= 1")
    rules = {"min_runs": min_runs, "min_seconds": min_seconds, "max_runs": max_runs, "max_seconds": max_seconds}
    tracks = [_Track(f) for f in run_fns]
    for t in tracks:
        _warm_up(t, warmup, clock)
    start = clock()
    last_progress = -1.0
    while not all(t.stop_rule is not None for t in tracks):
        for t in tracks:
            if t.stop_rule is None:
                _timed_block(t, rules, start, block_seconds, clock, cpu_clock)
        if progress is not None:
            frac = _done_fraction(tracks, min_runs, min_seconds)
            if frac - last_progress >= 0.05 or frac >= 1.0:
                last_progress = frac
                progress(round(frac, 3))
    cores, rss = cores_available(), peak_rss_mb()
    return [_track_result(t, warmup, rules, cores, rss) for t in tracks]


def _warm_up(t: _Track, warmup: int, clock: Callable[[], float]) -> None:
    """The warm-up runs (the first call is the first-inference time); with none, the first call is a sample too."""
    for i in range(max(warmup, 1)):
        t0 = clock()
        t.fn()
        if i == 0:
            t.first_ms = (clock() - t0) * 1e3
    if warmup == 0:
        t.samples.append(t.first_ms or 0.0)
        t.timed_s += (t.first_ms or 0.0) / 1e3


def _timed_block(t: _Track, rules: dict, start: float, block_seconds: float, clock: Callable[[], float],
                 cpu_clock: Callable[[], float]) -> None:
    """Timed runs of one callable for about ``block_seconds``, or until a stop rule ends it (recorded on ``t``)."""
    block_start = clock()
    cpu0 = cpu_clock()
    while True:
        t0 = clock()
        t.fn()
        t1 = clock()
        t.samples.append((t1 - t0) * 1e3)
        n = len(t.samples)
        t.timed_s += t1 - t0
        if n >= rules["min_runs"] and t.timed_s >= rules["min_seconds"]:
            t.stop_rule = StopRule.MIN_RUNS_AND_SECONDS
        elif n >= rules["max_runs"]:
            t.stop_rule = StopRule.MAX_RUNS
        elif t1 - start >= rules["max_seconds"]:
            t.stop_rule = StopRule.MAX_SECONDS
        if t.stop_rule or t1 - block_start >= block_seconds:
            break
    t.cpu_s += cpu_clock() - cpu0


def _done_fraction(tracks: list[_Track], min_runs: int, min_seconds: float) -> float:
    """How far the slowest callable is towards its minimum runs and seconds (1.0: all stopped)."""
    return min(
        1.0 if t.stop_rule is not None
        else min(len(t.samples) / min_runs, t.timed_s / min_seconds if min_seconds > 0 else 1.0)
        for t in tracks
    )


def _track_result(t: _Track, warmup: int, rules: dict, cores: int, rss: float) -> dict:
    wall = sum(t.samples) / 1e3
    return {
        "runs": len(t.samples),
        "warmup": warmup,
        "stop_rule": t.stop_rule,
        "rules": dict(rules),
        "timed_seconds": round(t.timed_s, 4),
        "latency_ms": latency_stats(t.samples),
        "throughput_qps": round(len(t.samples) / wall, 3) if wall > 0 else None,
        "throughput_mode": "single_stream",
        "first_inference_ms": t.first_ms,
        "samples_ms": [round(x, 6) for x in t.samples],
        "peak_rss_mb": rss,
        "cpu_utilisation": round(t.cpu_s / t.timed_s / cores, 4) if t.timed_s > 0 else None,
        "cores": cores,
    }


def measure(
    run_once: Callable[[], object],
    *,
    warmup: int = WARMUP,
    min_runs: int = 50,
    min_seconds: float = 2.0,
    max_runs: int = 100_000,
    max_seconds: float = 600.0,
    progress: Callable[[float], None] | None = None,
    load_ms: float | None = None,
    threads: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
) -> dict:
    """Warm up, then time ``run_once`` until both ``min_runs`` and ``min_seconds`` are reached.

    Returns per-run latencies (``samples_ms``), ``latency_ms`` statistics (p50/p90/p99, mean,
    std, min, max and a distribution-free 95 % CI of the median), single-stream
    ``throughput_qps``, ``first_inference_ms``, the caller's ``load_ms``, peak RSS, CPU
    utilisation (process CPU time / timed wall time / cores) and ``threads``.
    """
    result = measure_interleaved(
        [run_once], warmup=warmup, min_runs=min_runs, min_seconds=min_seconds, max_runs=max_runs,
        max_seconds=max_seconds, progress=progress, clock=clock, cpu_clock=cpu_clock,
    )[0]
    result["load_ms"] = load_ms
    result["threads"] = threads
    return result


# --------------------------------------------------------------------------- artifacts


class BadArtifact(Exception):
    """The artifact directory is missing, incomplete or its manifest is unreadable, or the runtime can't run it."""

    kind = "bad_artifact"  # the runner's JSON error kind (remote/device_run.py reads it)

def artifact_hash(artifact_dir: str) -> str:
    import hashlib

    with open(os.path.join(artifact_dir, "manifest.json"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_artifact(artifact_dir: str) -> dict:
    """The artifact's manifest, or :class:`BadArtifact` with a one-line reason."""
    import json

    path = os.path.join(artifact_dir, "manifest.json")
    if not os.path.isdir(artifact_dir):
        raise BadArtifact(f"artifact '{artifact_dir}' not found (expected a directory with manifest.json)")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except OSError as err:
        raise BadArtifact(f"'{artifact_dir}' has no manifest.json: not an edgeopt artifact") from err
    except ValueError as err:
        raise BadArtifact(f"'{path}' is not valid JSON ({err})") from err
    runtime = manifest.get("runtime") if isinstance(manifest, dict) else None
    if not isinstance(runtime, dict) or "backend" not in runtime or "inputs" not in manifest:
        raise BadArtifact(f"'{path}' lacks the runtime/inputs entries an artifact needs")
    model = runtime.get("model")
    if model and not os.path.exists(os.path.join(artifact_dir, model)):
        raise BadArtifact(f"artifact '{artifact_dir}' is incomplete: '{model}' is missing")
    return manifest


_DTYPES = {"float": "float32", "double": "float64", "half": "float16", "bool": "bool"}


def _dim(d) -> int:
    return d if isinstance(d, int) and d > 0 else 1


def synthetic_feeds(inputs: list[dict], seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays at the manifest's input shapes/dtypes (symbolic dims become 1)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in inputs:
        shape = tuple(_dim(d) for d in spec.get("shape") or [])
        dtype = np.dtype(_DTYPES.get(spec.get("dtype", "float32"), spec.get("dtype", "float32")))
        if dtype.kind == "f":
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[spec["name"]] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[spec["name"]] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def feeds_from_npz(inputs: list[dict], npz_path: str, index: int = 0) -> dict[str, np.ndarray]:
    """Sample ``index`` (default the first) of each array named after an input (a leading sample axis is taken off)."""
    data = _load_npz(npz_path)
    feeds = {}
    for spec in inputs:
        name = spec["name"]
        if name not in data.files:
            raise BadArtifact(f"'{npz_path}' has no array named '{name}' (it has {', '.join(data.files)})")
        arr = data[name]
        shape = spec.get("shape") or []
        if arr.ndim == len(shape) and len(shape) > 0:
            b = _dim(shape[0])
            arr = arr[index * b: (index + 1) * b]  # batch-major: take that batch
        elif arr.ndim == len(shape) + 1:
            arr = arr[index]
        dtype = _DTYPES.get(spec.get("dtype", ""), spec.get("dtype"))
        arr = np.asarray(arr.astype(dtype) if dtype else arr)
        feeds[name] = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)  # a 0-d input stays 0-d
    return feeds


def _load_npz(npz_path: str):
    try:
        return np.load(npz_path)
    except (OSError, ValueError) as err:
        raise BadArtifact(f"inputs file '{npz_path}' is not a readable .npz ({err})") from err


def npz_samples(inputs: list[dict], npz_path: str) -> int:
    """How many samples ``npz_path`` holds for ``inputs`` (counted on the first input)."""
    spec = inputs[0]
    data = _load_npz(npz_path)
    if spec["name"] not in data.files:
        return 1
    arr, shape = data[spec["name"]], spec.get("shape") or []
    if arr.ndim == len(shape) and len(shape) > 0:
        return max(1, len(arr) // _dim(shape[0]))
    return len(arr) if arr.ndim == len(shape) + 1 else 1


def open_artifact(artifact_dir: str, threads: int | None = None) -> tuple[object, dict, float]:
    """(runner, manifest, load_ms). ``ImportError`` (runtime missing) is passed through."""
    from .runners import open_runner

    manifest = read_artifact(artifact_dir)
    t0 = time.perf_counter()
    try:
        runner = open_runner(artifact_dir, threads=threads, manifest=manifest)
    except ImportError:
        raise
    except KeyError as err:
        raise BadArtifact(f"artifact '{artifact_dir}' names an unknown backend or key {err}") from err
    except Exception as err:  # noqa: BLE001 - the runtime refused the files: a bad artifact
        raise BadArtifact(f"artifact '{artifact_dir}' failed to load: {type(err).__name__}: {err}") from err
    return runner, manifest, (time.perf_counter() - t0) * 1e3


def check_runs(runner, feeds: dict, artifact_dir: str) -> None:
    """One run before timing: a runtime that refuses the inputs is a bad artifact/input, not a crash."""
    try:
        runner.run(feeds)
    except Exception as err:  # noqa: BLE001 - reported as one line: the one that says what went wrong (OpenVINO's
        # exceptions open with "Exception from src/…/infer_request.cpp:224:" lines that only say where)
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        told = [ln for ln in lines if not (ln.startswith("Exception from ") and ln.endswith(":"))]
        shapes = {k: list(v.shape) for k, v in feeds.items()}
        text = " ".join(told or lines[:1])  # a node named by its fused ops runs long: the tail says what failed
        raise BadArtifact(f"artifact '{artifact_dir}' failed to run on inputs {shapes}: {type(err).__name__}: "
                          f"{text if len(text) <= 300 else text[:100] + ' … ' + text[-190:]}") from err


def run_record(artifact_dir: str, manifest: dict, measured: dict, *, env: dict, energy: dict | None,
               synthetic: bool, inputs_source: str | None) -> dict:
    """One benchmark result, in the JSON schema both the device CLI and ``edgeopt bench`` print."""
    return {
        "schema_version": SCHEMA_VERSION,
        "artifact": os.path.abspath(artifact_dir),
        "artifact_hash": artifact_hash(artifact_dir),
        "backend": manifest.get("backend") or manifest["runtime"]["backend"],
        "precision": manifest.get("precision"),
        "profile": manifest.get("profile"),
        "model": (manifest.get("source_model") or {}).get("path"),
        "validation": manifest.get("validation"),
        "inputs": {"source": inputs_source or "random", "synthetic": synthetic},
        **measured,
        "energy": energy,
        "environment": env,
    }
