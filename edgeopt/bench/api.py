"""``bench_artifacts``: measure artifacts side by side (``bench_model``, convert then measure, is in :mod:`.model`).

Artifacts are measured in this process with the device-side core
(:func:`edgeopt.runtime.measure.measure_interleaved`): all are loaded, warmed up, and then timed
in round-robin blocks so they share the machine's noise. Each run is stored in the results
store unless ``store=False``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from edgeopt.enums import RunLocation
from edgeopt.errors import BadInputError, EdgeoptError, MissingDependencyError
from edgeopt.paths import CacheArea, cache_subdir
from edgeopt.run_record import RunRecord
from edgeopt.runtime.measure import BLOCK_SECONDS, WARMUP
from edgeopt.runtime.reference import REFERENCE, REFERENCE_FP32


class BenchOptions(BaseModel):
    """How to measure: local ``bench`` uses every field; ``remote_bench`` the runner's (threads, warmup,
    min_runs, min_seconds, streams, batch, inputs, outputs) and the store's (store, db)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threads: int | None = Field(default=None, gt=0)
    warmup: int = Field(default=WARMUP, ge=0)
    min_runs: int = Field(default=50, gt=0)
    min_seconds: float = Field(default=2.0, ge=0)
    max_runs: int = Field(default=100_000, gt=0)
    max_seconds: float = Field(default=600.0, gt=0)
    block_seconds: float = Field(default=BLOCK_SECONDS, gt=0)
    inputs: str | None = None
    outputs: str | None = None  # write the outputs for ``inputs`` here (.npz), to diff with a device's
    per_layer: bool = False
    streams: int | Literal["auto"] | None = None
    batch: int | None = Field(default=None, gt=0)
    throughput_seconds: float | None = Field(default=None, gt=0)
    price_per_kwh: float = Field(default=0.30, ge=0)
    profile: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    store: bool = True
    db: str | None = None
    location: RunLocation = RunLocation.LOCAL
    memory: bool = False  # each artifact's peak resident memory, measured in a child process, beside its prediction

    @field_validator("inputs", "outputs", "db", mode="before")
    @classmethod
    def _path(cls, v):
        return os.fspath(v) if isinstance(v, os.PathLike) else v

    @field_validator("streams", mode="before")
    @classmethod
    def _streams(cls, v):
        from edgeopt.runtime.throughput import parse_streams

        try:
            return parse_streams(v)
        except ValueError as err:
            raise ValueError(f"streams must be a count >= 1 or 'auto', not {v!r}") from err

    @property
    def wants_throughput(self) -> bool:
        from edgeopt.runtime.throughput import throughput_asked

        return throughput_asked(self.streams, self.batch)


def _open(path: str, threads: int | None):
    from edgeopt.runtime.measure import BadArtifact, open_artifact

    try:
        return open_artifact(path, threads=threads)
    except BadArtifact as err:
        raise BadInputError(str(err), "pass a directory written by edgeopt convert") from err
    except ImportError as err:
        raise MissingDependencyError(f"the runtime of artifact '{path}' is not installed: {err}",
                                     "run edgeopt doctor to see which backends are installed") from err


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def _feeds(manifest: dict, inputs: str | None):
    from edgeopt.runtime.measure import BadArtifact, feeds_from_npz, synthetic_feeds

    if not inputs:
        return synthetic_feeds(manifest["inputs"]), True
    try:
        return feeds_from_npz(manifest["inputs"], inputs), False
    except BadArtifact as err:
        raise BadInputError(str(err), "the .npz needs one array per model input, named like it") from err


def samples_in_inputs(manifest_inputs: list[dict], npz_path: str) -> int | None:
    """How many samples an ``--inputs`` .npz holds (the runner times the first one only)."""
    import numpy as np

    try:
        data = np.load(npz_path)
    except (OSError, ValueError):
        return None
    counts = []
    for spec in manifest_inputs:
        if spec["name"] not in data.files:
            return None
        arr, shape = data[spec["name"]], spec.get("shape") or []
        if arr.ndim == len(shape) + 1:
            counts.append(arr.shape[0])
        elif arr.ndim == len(shape) and shape:
            batch = shape[0] if isinstance(shape[0], int) and shape[0] > 0 else 1
            counts.append(arr.shape[0] // batch)
    return min(counts) if counts else 1


def note_inputs_used(record: dict, manifest_inputs: list[dict], npz_path: str | None,
                     manifest_cascade: bool = False) -> None:
    """Record (and warn) when ``--inputs`` holds several samples: the timings use the first only."""
    n = samples_in_inputs(manifest_inputs, npz_path) if npz_path else None
    if not n or n <= 1:
        return
    record.setdefault("inputs", {}).update(samples_in_file=n, samples_used=1)
    record.setdefault("warnings", []).append(
        f"inputs: {Path(npz_path).name} holds {n} samples; the timings repeat the first one only "
        "(the latency of one input; all of them count for accuracy with convert --eval)"
        + ("; the early-exit figures run every sample" if manifest_cascade else ""))


def save_outputs(runner, feeds: dict, path: str) -> None:
    """The artifact's outputs for ``feeds`` as an .npz (ONNX output names), written atomically: the same
    file ``remote-bench --outputs`` fetches from a device, so the two can be diffed."""
    import numpy as np

    from edgeopt.files import atomic_path

    outs = runner.run(feeds)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in outs.items()})


def _tdp(profile_name: str | None) -> tuple[float | None, str | None]:
    from edgeopt.profiles import load_profile

    try:
        p = load_profile(profile_name or "host")
        return p.tdp_w, p.name
    except EdgeoptError:
        return None, profile_name


def _energy_pass(runner, feeds, meter, seconds: float = 1.0) -> dict:
    """A short extra pass with the power meter on, for one artifact (interleaved timing can't split energy)."""
    import time

    meter.start()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        runner.run(feeds)
        n += 1
    energy = meter.stop()
    energy["joules_per_inference"] = energy["joules"] / n if n else None
    energy["inferences"] = n
    return energy


def _open_checked(path: str, o: BenchOptions) -> dict:
    """One artifact verified (sha256), opened and run once on its feeds (``o.outputs`` saved): what measuring needs."""
    from edgeopt.artifact import verify_artifact
    from edgeopt.runtime.measure import BadArtifact, check_runs

    rss0 = _rss_mb()
    verify_artifact(path)  # the files measured are the files converted (sha256), or exit 3
    runner, manifest, load_ms = _open(path, o.threads)
    feeds, synthetic = _feeds(manifest, o.inputs)
    try:
        check_runs(runner, feeds, path)
    except BadArtifact as err:
        raise BadInputError(str(err), "check --inputs against the model's inputs") from err
    if o.outputs:
        save_outputs(runner, feeds, o.outputs)
    rss1 = _rss_mb()
    return {"path": path, "runner": runner, "manifest": manifest, "load_ms": load_ms, "feeds": feeds,
            "synthetic": synthetic, "load_rss_mb": round(rss1 - rss0, 1) if rss0 and rss1 else None}


def _placement(x: dict) -> dict | None:
    """The artifact's op → unit report beside its timing (ONNX Runtime and OpenVINO artifacts; None otherwise)."""
    from edgeopt.placement.plans import artifact_placement

    try:
        return artifact_placement(x["path"], x["manifest"])
    except Exception:  # noqa: BLE001 - the report is informative: a runtime that can't re-load the graph leaves it out
        return None


def _record(x: dict, m: dict, energy, o: BenchOptions, env: dict, name: str | None, validation: dict | None,
            interleaved_with: int) -> RunRecord:
    """One measured artifact's :class:`RunRecord` (stored when ``o.store``)."""
    from edgeopt.bench.energy import energy_figures
    from edgeopt.identity import local_identity
    from edgeopt.runtime import environment
    from edgeopt.runtime.measure import run_record

    m["load_ms"] = x["load_ms"]
    m["threads"] = o.threads or getattr(x["runner"], "threads", None)
    m["load_rss_mb"] = x["load_rss_mb"]
    rec = run_record(x["path"], x["manifest"], m, env=env, energy=energy, synthetic=x["synthetic"],
                     inputs_source=o.inputs)
    prof = rec.get("profile")
    built_for = (prof.get("name") if isinstance(prof, dict) else prof) or o.profile
    ident = local_identity(env, built_for)  # measured here: the host's identity, whatever it was built for
    tdp, _ = _tdp(ident["profile"])  # energy from the profile of the machine that ran it
    rec["identity"] = ident
    rec["device"] = ident["machine"]
    note_inputs_used(rec, x["manifest"]["inputs"], o.inputs, bool(x["manifest"]["runtime"].get("cascade")))
    if (busy := environment.interference_warning(env)):
        rec.setdefault("warnings", []).append(busy)
    rec["labels"] = dict(o.labels)
    if getattr(x["runner"], "execution", None):  # which provider/device ran it, and how (e.g. CUDA with Q/DQ)
        rec["execution"] = x["runner"].execution
    rec["placement"] = _placement(x)
    if o.memory:
        from edgeopt.memory.bench_row import memory_row

        rec["memory"] = memory_row(x["path"], o.threads)
    rec["name"] = name or Path(x["path"]).name
    if validation:
        rec["validation"] = validation
    rec["interleaved_with"] = interleaved_with
    rec["energy_figures"] = energy_figures(rec, tdp_w=tdp, price_per_kwh=o.price_per_kwh)
    if o.per_layer:
        from edgeopt.bench.per_layer import per_layer_for_artifact

        rec["per_layer"] = per_layer_for_artifact(x["path"], x["manifest"], x["feeds"], threads=o.threads,
                                                  profile=ident["profile"])
    if x.get("early_exit"):  # early exits: the mean over the inputs, each exit, the worst case
        rec["early_exit"] = x["early_exit"]
        rec.setdefault("warnings", []).extend(x["early_exit"].get("warnings", []))
    record = RunRecord.model_validate(rec)
    if o.store:
        from edgeopt.results import store_run

        record.run_id = store_run(record, o.db)
    return record


def bench_artifacts(artifacts: list[str | os.PathLike], options: BenchOptions | None = None, *,
                    progress: Callable[[float], None] | None = None,
                    names: dict[str, str] | None = None, validations: dict[str, dict] | None = None, keep_going: bool = False) -> dict:
    """Measure ``artifacts`` side by side; returns ``{"rows": [...], "best": ..., "environment": ...}``, each
    measured row a :class:`RunRecord` (a failed one a dict with its error)."""
    from edgeopt.converters.registry import distributions
    from edgeopt.runtime import environment
    from edgeopt.runtime.measure import measure_interleaved

    o = options or BenchOptions()
    if not artifacts:
        raise BadInputError("no artifact to measure", "pass one or more artifact directories")
    if o.outputs and (len(artifacts) != 1 or not o.inputs):
        from edgeopt.errors import UsageError

        raise UsageError("--outputs needs one artifact and --inputs (an .npz of the model's inputs)",
                         "edgeopt bench ARTIFACT --inputs in.npz --outputs out.npz")
    if o.store:  # a store that can't take the result fails now, not after the measurement
        from edgeopt.results import check_store_writable

        check_store_writable(o.db)
    env = environment.collect(o.location.value, libraries=distributions())
    opened: list[dict] = []
    failed: list[dict] = []
    try:
        for a in artifacts:
            try:
                opened.append(_open_checked(str(a), o))
            except EdgeoptError as err:
                if not keep_going:
                    raise
                name = (names or {}).get(str(a)) or Path(a).name
                failed.append({"name": name, "backend": name, "artifact": str(a), "status": "failed",
                               "error": err.one_line()[:300]})
        if not opened:
            raise BadInputError(f"no artifact could be measured: {failed[0]['error'] if failed else ''}")
        measured = measure_interleaved(
            [(lambda r=x["runner"], f=x["feeds"]: r.run(f)) for x in opened],
            warmup=o.warmup, min_runs=o.min_runs, min_seconds=o.min_seconds, max_runs=o.max_runs,
            max_seconds=o.max_seconds, block_seconds=o.block_seconds, progress=progress,
        )
        meter = environment.open_power_meter()
        energies = [_energy_pass(x["runner"], x["feeds"], meter) if meter else None for x in opened]
        if o.wants_throughput:  # after the latencies, one artifact at a time (not interleaved)
            from edgeopt.runtime.throughput import measure_throughput, throughput_seconds

            for x, m in zip(opened, measured, strict=True):
                m["throughput"] = measure_throughput(
                    x["runner"], lambda t, p=x["path"]: _open(p, t)[0], x["feeds"], x["manifest"]["inputs"],
                    streams=o.streams, batch=o.batch, threads=o.threads,
                    seconds=throughput_seconds(o.throughput_seconds, o.min_seconds), single_stream_qps=m["throughput_qps"])
        for x in opened:  # an early-exit artifact over every --inputs sample (bench/early_exit.py)
            if x["manifest"]["runtime"].get("cascade"):
                from edgeopt.bench.early_exit import cascade_figures

                x["early_exit"] = cascade_figures(x, o.inputs)
    finally:
        for x in opened:
            close = getattr(x["runner"], "close", None)
            if close:
                close()
    environment.after(env)

    rows = [_record(x, m, energy, o, env, (names or {}).get(x["path"]), (validations or {}).get(x["path"]),
                    len(opened)) for x, m, energy in zip(opened, measured, energies, strict=True)]
    seen: dict[str, int] = {}
    for r in rows:  # the same directory name twice: number them
        seen[r["name"]] = seen.get(r["name"], 0) + 1
        if seen[r["name"]] > 1:
            r["name"] = f"{r['name']}#{seen[r['name']]}"
    best = min(rows, key=lambda r: r["latency_ms"]["p50"])
    for r in rows:
        r["best"] = r is best
        r["status"] = "ok"
    return {"rows": rows + failed, "best": best["name"], "environment": env,
            "note": "peak_rss_mb is the whole process (all artifacts loaded); load_rss_mb is each artifact's load"}


# --------------------------------------------------------------------------- bench a model


def cache_dir() -> Path:
    return cache_subdir(CacheArea.ARTIFACTS)


REFERENCE_NOTE = "reference: the original model in ONNX Runtime FP32"


def reference_manifest(model: Path, model_sha: str, runtime: str | None = None, settings: dict | None = None):
    """The reference's :class:`~edgeopt.artifact.Manifest`, from the one builder ``convert`` uses: no plan (its
    ``plan`` holds the note), no profile (it is the same for every profile), not validated (it is the reference).
    ``runtime``/``settings``: the same model read by another runtime at its FP32 settings (a speed claim's
    reference in an OpenVINO verdict); by default bench's reference, ONNX Runtime FP32."""
    from edgeopt.artifact import build_manifest, tensor_infos
    from edgeopt.manifest_types import PlanEntry, RuntimeEntry
    from edgeopt.model import graph_inputs, graph_outputs, load_onnx

    m = load_onnx(model)
    runtime = runtime or REFERENCE
    note = REFERENCE_NOTE if runtime == REFERENCE else f"FP32 reference: the ONNX model read by {runtime} at {settings}"
    return build_manifest(
        backend=runtime, precision="fp32", profile=None, source={"path": str(model), "sha256": model_sha},
        inputs=tensor_infos(graph_inputs(m)), outputs=tensor_infos(graph_outputs(m)),
        runtime=RuntimeEntry(backend=runtime, model="model.onnx", settings=dict(settings or {})), plan_hash="",
        plan=PlanEntry(note=note))


def reference_artifact(model: Path, model_sha: str, runtime: str | None = None, settings: dict | None = None) -> Path:
    """The user's model as-is in ONNX Runtime FP32 (the baseline row), cached by content; with ``runtime`` and
    ``settings``, the same model read by that runtime at those settings (cached beside it), so ``edgeopt bench
    ARTIFACT THIS`` repeats a speed claim made against it."""
    import json
    import shutil
    import tempfile

    from edgeopt.artifact import MANIFEST, write_manifest
    from edgeopt.cache_key import artifact_key

    runtime = runtime or REFERENCE
    # "-manifest": the reference's manifest is a Manifest since the raw dict before it (a new cache entry)
    key = f"{REFERENCE_FP32}-reference-manifest" if runtime == REFERENCE else \
        f"{runtime}-{json.dumps(settings or {}, sort_keys=True)}-reference-manifest"
    out = cache_dir() / f"reference-{artifact_key(key, model_sha)[:32]}"
    if (out / MANIFEST).is_file():
        return out
    manifest = reference_manifest(model, model_sha, runtime, settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-ref-"))
    shutil.copyfile(model, tmp / "model.onnx")
    write_manifest(tmp, manifest)
    from edgeopt.errors import OutputExistsError
    from edgeopt.outputs import publish

    try:
        publish(tmp, out)
    except (OutputExistsError, OSError):  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
