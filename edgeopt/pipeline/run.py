"""``run_pipeline``: build every target of an ``edgeopt.yaml``, check the gates, write ``dist/``.

``dist/`` (the recipe's ``output``, relative to the recipe) is built in a temporary sibling and
swapped in at the end, so a run leaves either the old ``dist/`` or the new one:

* ``<target>/``: the artifact (manifest + model files) of every target that built and passed,
  without its ``build.json`` (durations, host: they go into ``summary.json``), so that it and its
  tarball are byte-identical across clean builds; ``$SOURCE_DATE_EPOCH`` (``created``) is 0 unless set;
* ``<target>.tar.gz``: that artifact + ``edgeopt_runtime/`` (the device-side runner) for boards,
  reproducible (see :mod:`edgeopt.pipeline.dist`), plus ``c_array/`` for TFLite targets;
* ``<target>-c_array/``: ``model_data.h``/``.c`` (TFLite targets): the model as a C array;
* ``summary.json``: every target's figures, gate results, cache use and content hash;
* ``report.html``: the HTML report of the local benchmark (with ``bench=local``).

A target that fails to build is recorded (status ``build_failed``, its one-line error) and the
others still build; a target that misses a gate is recorded (status ``gate_failed``) and gets no
directory or tarball. :func:`raise_for_failures` turns those into the exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, field_serializer

from edgeopt.errors import EdgeoptError, ExitCode, GateFailedError, UsageError
from edgeopt.pipeline.recipe import LatencySource, LoadedRecipe, Target, load_pipeline_recipe
from edgeopt.pipeline.rows import TargetRow, TargetStatus

SUMMARY = "summary.json"
REPORT = "report.html"
SCHEMA_VERSION = 1


class PipelineResult(BaseModel):
    recipe: str
    output: str
    ok: bool
    bench: str
    targets: list[TargetRow]
    failures: list[str] = []
    report: str | None = None
    notes: list[str] = []
    determinism: dict = {}
    environment: dict | None = None
    seconds: float = 0.0
    cache_dir: str = ""
    schema_version: int = SCHEMA_VERSION

    @field_serializer("targets")
    def _targets_json(self, targets: list[TargetRow]) -> list[dict]:
        return [t.summary_json() for t in targets]


def plan_recipe(t: Target, gates, metric=None):
    """The :class:`edgeopt.plan.Recipe` (chain options) of target ``t`` under ``gates`` (``metric``: the
    recipe's task metric, unless the target names its own)."""
    from edgeopt.plan import Recipe

    drop = t.max_accuracy_drop if t.max_accuracy_drop is not None else (
        gates.max_accuracy_drop if t.accuracy_aware or t.prune == "auto" else None)
    return Recipe.model_validate({**t.chain_request().model_dump(), "max_accuracy_drop": drop,
                                  "metric": t.metric if t.metric is not None else metric})


def _profile(lr: LoadedRecipe, name: str):
    from edgeopt.profiles import load_profile

    looks_like_file = name.endswith((".yaml", ".yml")) or "/" in name
    return load_profile(str(lr.resolve(name)) if looks_like_file else name)


def _error_line(err: BaseException) -> str:
    if isinstance(err, EdgeoptError):
        return err.one_line()
    return f"internal error: {type(err).__name__}: {str(err).splitlines()[0][:240] if str(err) else ''}"


def _build_target(lr: LoadedRecipe, t: Target, work: Path, model_sha: str, on_event) -> dict:
    from edgeopt.options import ConvertOptions
    from edgeopt.pipeline.cache import cached_convert

    r, gates = lr.recipe, lr.recipe.gates.merged(t.gates)
    prof = _profile(lr, t.profile)
    m = r.model
    shapes = {k: tuple(v) for k, v in m.inputs.items()}
    pre = m.preprocess
    if isinstance(pre, str) and pre.endswith((".yaml", ".yml")):
        pre = str(lr.resolve(pre))
    t0 = time.perf_counter()
    options = ConvertOptions(recipe=plan_recipe(t, gates, r.metric), calib=lr.resolve(r.data.calib),
                             eval=lr.resolve(r.data.eval), input_shapes=shapes, preprocess=pre, from_torch=m.from_torch,
                             weights=lr.resolve(m.weights), metric_search_path=[lr.base])
    built = cached_convert(lr.resolve(m.path), prof, options, model_sha=model_sha,
                           on_warning=lambda w: on_event(f"{t.name}: warning: {w}"))
    from edgeopt.artifact import BUILD, read_build_facts

    dest = work / t.name
    shutil.copytree(built.artifact, dest, ignore=lambda d, names: [BUILD] if Path(d) == built.artifact else [])
    dest.chmod(0o755)
    return {**built.model_dump(), "artifact": dest, "profile": prof, "gates": gates, "build_seconds": round(time.perf_counter() - t0, 3),
            "build_facts": read_build_facts(built.artifact)}


def _bench(rows: list[TargetRow], lr: LoadedRecipe, db: Path, on_event) -> dict:
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    b = lr.recipe.bench
    ev = lr.resolve(lr.recipe.data.eval)
    inputs = str(ev) if ev is not None and ev.suffix == ".npz" else None
    paths = {str(x.artifact): x.name for x in rows}
    on_event(f"benchmarking {len(paths)} artifacts locally (interleaved)")
    opts = BenchOptions(warmup=b.warmup, min_runs=b.min_runs, min_seconds=b.min_seconds, threads=b.threads,
                        inputs=inputs, db=str(db), labels={"source": "edgeopt pipeline"})
    return bench_artifacts(list(paths), opts, names=paths)


def _model_sha(lr: LoadedRecipe) -> str:
    import hashlib

    from edgeopt.cache_key import path_sha256
    from edgeopt.errors import BadInputError
    from edgeopt.model import load_onnx

    m = lr.recipe.model
    if m.path:
        p = lr.resolve(m.path)
        load_onnx(p)  # one-line error for a missing or broken model
        return path_sha256(p)
    w = lr.resolve(m.weights)
    if w is not None and not w.is_file():
        raise BadInputError(f"model.weights '{w}' not found", "check the path (relative to the recipe)")
    return hashlib.sha256(f"{m.from_torch}\0{path_sha256(w)}".encode()).hexdigest()


@contextlib.contextmanager
def _source_date_epoch():
    """``$SOURCE_DATE_EPOCH`` = 0 while the pipeline builds, unless the user set it."""
    from edgeopt.artifact import SOURCE_DATE_EPOCH

    if os.environ.get(SOURCE_DATE_EPOCH):
        yield
        return
    os.environ[SOURCE_DATE_EPOCH] = "0"
    try:
        yield
    finally:
        os.environ.pop(SOURCE_DATE_EPOCH, None)


def run_pipeline(recipe_path: str | os.PathLike, *, bench: str = "local", output: str | os.PathLike | None = None,
                 on_event: Callable[[str], None] | None = None) -> PipelineResult:
    """Build, validate, (benchmark,) gate and package every target; see the module doc."""
    with _source_date_epoch():
        return _run_pipeline(recipe_path, bench=bench, output=output, on_event=on_event)


def _target_row(lr: LoadedRecipe, t: Target, tmp: Path, model_sha: str, say) -> TargetRow:
    """One target built (or its failure: one target failing does not stop the others), as a summary row."""
    from edgeopt.pipeline import dist

    say(f"building {t.name}")
    row = TargetRow(name=t.name, profile=t.profile, backend=t.backend, status=None)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # library prints must not reach --json's stdout
            b = _build_target(lr, t, tmp, model_sha, say)
    except Exception as err:  # noqa: BLE001 - one target failing does not stop the others
        failed = isinstance(err, GateFailedError)
        row.status = TargetStatus.GATE_FAILED if failed else TargetStatus.BUILD_FAILED
        row.error = _error_line(err)
        row.exit_code = int(err.exit_code) if isinstance(err, EdgeoptError) else int(ExitCode.INTERNAL)
        if failed:
            row.failed_gates = [err.message]
        say(f"{t.name}: {row.error}")
        return row
    manifest = json.loads((b["artifact"] / "manifest.json").read_text())
    _set(row, status=TargetStatus.OK, artifact=b["artifact"], backend=manifest["backend"],
         precision=manifest["precision"], cached=b["cached"], cache_key=b["key"], plan_hash=b["plan_hash"],
         build_seconds=b["build_seconds"], artifact_bytes=dist.dir_bytes(b["artifact"]), files=manifest["files"],
         content_hash=dist.content_hash(manifest),
         determinism=manifest.get("determinism") or dist.determinism(manifest["backend"]),
         build_facts=b["build_facts"], validation=manifest.get("validation"), warnings=manifest.get("warnings", []))
    row._gates, row._profile, row._manifest = b["gates"], b["profile"], manifest
    return row


def _set(row: TargetRow, **fields) -> None:
    for key, value in fields.items():
        setattr(row, key, value)


def _gate_row(x: TargetRow, br: dict | None, lr: LoadedRecipe, notes: list[str]) -> None:
    """A built target's benchmark figures (``br``: its bench row, if measured) and gates; a missed gate fails it."""
    from edgeopt.pipeline import gates as gate_mod

    r = lr.recipe
    if br is not None:
        lat = br["latency_ms"]
        x.bench = {"p50_ms": lat["p50"], "p90_ms": lat["p90"], "p99_ms": lat["p99"], "runs": br["runs"],
                      "ci95_ms": [lat["ci95_low"], lat["ci95_high"]], "load_ms": br.get("load_ms"),
                      "load_rss_mb": br.get("load_rss_mb"), "inputs": br.get("inputs"),
                      "run_id": br.get("run_id"), "location": "local"}
    g = x._gates
    est = None
    local_is_target = gate_mod.measured_here_for(x._profile.name)
    needs_est = (g.max_p99_latency_ms is not None and (br is None or not local_is_target)) \
        or (g.max_ram_mb is not None and (br or {}).get("load_rss_mb") is None) \
        or (g.max_p99_latency_ms is not None and g.latency_source == LatencySource.ESTIMATED)
    if needs_est:
        try:
            est = gate_mod.estimate(lr.resolve(r.model.path), x._profile, x.precision,
                                    {k: tuple(v) for k, v in r.model.inputs.items()}, x.artifact_bytes)
            x.estimate = est
        except Exception as err:  # noqa: BLE001 - an estimate that can't be made fails its gate
            notes.append(f"{x.name}: no estimate ({_error_line(err)})")
    results = gate_mod.check(g, validation=x.validation, bench=x.bench, est=est,
                             artifact_bytes=x.artifact_bytes, target_profile=x._profile.name)
    x.gates = [gr.model_dump() for gr in results]
    missed = [gr.line() for gr in results if not gr.passed]
    if missed:
        _set(x, status=TargetStatus.GATE_FAILED, failed_gates=missed, exit_code=int(ExitCode.GATE_FAILED))


def _run_pipeline(recipe_path, *, bench: str, output, on_event) -> PipelineResult:
    from edgeopt.pipeline import dist
    from edgeopt.pipeline.cache import cache_root

    t_start = time.perf_counter()
    say = on_event or (lambda _m: None)
    if bench not in ("local", "none"):
        raise UsageError(f"--bench '{bench}' is not one of local, none", "use --bench local or --bench none")
    lr = load_pipeline_recipe(recipe_path)
    r = lr.recipe
    for t in r.targets:
        g = r.gates.merged(t.gates)
        if g.max_p99_latency_ms is not None and g.latency_source == LatencySource.MEASURED and bench == "none":
            raise UsageError(f"target '{t.name}': the p99 latency gate is 'measured' but --bench none was given",
                             "use --bench local, or latency_source: estimated")
    out = Path(output) if output is not None else lr.resolve(r.output)
    from edgeopt.outputs import check_output, publish

    d = r.data
    check_output(out, force=True, inputs=(lr.path, lr.resolve(r.model.path) if r.model.path else None,
                                          lr.resolve(d.calib) if d.calib else None,
                                          lr.resolve(d.eval) if d.eval else None))
    model_sha = _model_sha(lr)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    tmp.chmod(0o755)
    notes: list[str] = []
    try:
        rows = [_target_row(lr, t, tmp, model_sha, say) for t in r.targets]
        built = [x for x in rows if x.status == TargetStatus.OK]
        bench_rows: dict[str, dict] = {}
        env = None
        report_db = tmp / ".results.db"
        if bench == "local" and built:
            try:
                res = _bench(built, lr, report_db, say)
            except EdgeoptError as err:  # figures that can't be measured fail their gates, with this note
                notes.append(f"local benchmark failed: {err.one_line()}")
                res = {"rows": [], "environment": None}
            env = res.get("environment")
            for br in res["rows"]:
                bench_rows[br["name"]] = br
        for x in built:
            _gate_row(x, bench_rows.get(x.name), lr, notes)
        report = None
        if bench == "local" and bench_rows:
            report = _report(tmp, report_db, [b.get("run_id") for b in bench_rows.values()], notes)
        elif bench == "none":
            notes.append("HTML report skipped: it shows benchmark runs (use --bench local)")
        report_db.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(str(report_db) + suffix).unlink(missing_ok=True)
        for x in rows:
            _package(x, tmp, notes)
        failures = [f"target '{x.name}': " + ("; ".join(x.failed_gates) if x.failed_gates else x.error)
                    for x in rows if x.status != TargetStatus.OK]
        result = PipelineResult(
            recipe=str(lr.path), output=str(out), ok=not failures, bench=bench,
            targets=rows,
            failures=failures, report=report, notes=notes, environment=env, cache_dir=str(cache_root()),
            determinism={"artifacts": "dist/<target>/ is byte-identical across clean builds with the same inputs "
                                      "(manifest.created from $SOURCE_DATE_EPOCH, 0 unless set; durations and host "
                                      "in build_facts here, not in the artifact), except source_model.path, the "
                                      "model's path as resolved from the recipe; per backend: targets[].determinism",
                         "content_hash": "sha256 of the manifest without " + ", ".join(dist.VOLATILE_MANIFEST_KEYS),
                         "tarballs": "reproducible: sorted, mtime $SOURCE_DATE_EPOCH or 0, owner 0, gzip mtime 0"},
        )
        result.seconds = round(time.perf_counter() - t_start, 3)
        (tmp / SUMMARY).write_text(json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
        publish(tmp, out, force=True)  # check_output allowed it: dist/ is rebuilt
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _package(x: TargetRow, tmp: Path, notes: list[str]) -> None:
    """Tarball (and C array) for a passing target; a failing one's directory is removed."""
    from edgeopt.pipeline import dist

    art = x.artifact
    if x.status != TargetStatus.OK:
        if art is not None:
            shutil.rmtree(art, ignore_errors=True)
            x.artifact = None
        return
    extra = {}
    c_dir = tmp / f"{x.name}-c_array"  # model_data.h/.c for the firmware build, also in the tarball
    files, note = dist.c_array(art, x._manifest, c_dir, x.name)
    if note:
        notes.append(note)
    if files:
        extra["c_array"] = c_dir
        x.c_array = {**files, "dir": c_dir.name}
    x.tarball = dist.write_tarball(art, tmp / f"{x.name}.tar.gz", x.name, extra)
    x.artifact = x.name


def _report(tmp: Path, db: Path, run_ids: list, notes: list[str]) -> str | None:
    try:
        from edgeopt.report import build_report
    except ImportError:
        notes.append("HTML report skipped: edgeopt.report is not available in this build")
        return None
    try:
        build_report(tmp / REPORT, [i for i in run_ids if i is not None], db=db)
        return REPORT
    except Exception as err:  # noqa: BLE001 - the report is optional; the summary says why it is missing
        notes.append(f"HTML report skipped: {_error_line(err)}")
        return None


def raise_for_failures(result: PipelineResult) -> None:
    """Exit 5 (one line: target and figure) when only gates failed; a build failure's own code otherwise."""
    if result.ok:
        return
    failed = [t for t in result.targets if t.status != TargetStatus.OK]
    details = {"summary": result.model_dump(mode="json")}
    line = "; ".join(result.failures)
    builds = [t for t in failed if t.status == TargetStatus.BUILD_FAILED]
    if not builds:
        raise GateFailedError(f"gate failed: {line}", f"see {Path(result.output) / SUMMARY}", details=details)
    err = EdgeoptError(f"{len(builds)} of {len(result.targets)} targets failed to build: {line}",
                       f"the others are in {result.output}", details=details)
    err.exit_code = ExitCode(builds[0].exit_code if builds[0].exit_code is not None else int(ExitCode.INTERNAL))
    err.kind = "pipeline_failed"
    raise err
