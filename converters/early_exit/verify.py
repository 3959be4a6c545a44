"""The cascade measured in the runtime that ships, before it is kept: the stage models the profile's backend wrote
run through the cascade runner over held-back samples of ``--eval``, against the same model without exits converted
by the same backend, each sample timed alternately on the two (one thread, this host). A prediction from stage
times alone misses what each extra call costs (the runner, the copies between stages, the softmax of each head),
and that cost differs between runtimes: OpenVINO pays more per split than ONNX Runtime."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from edgeopt.runtime.cascade import PLAIN_DIR

SAMPLES = 64  # of --eval, timed on both
REPEATS = 3  # runs per sample (the median)
SCRATCH = "plain_by_backend"  # under the run's work dir


def plain_by_backend(stage, spec, inter, ctx, run_stage):
    """The model without exits through the backend, in the run's scratch space: what is timed against the cascade,
    and what becomes the artifact where the cascade does not pay."""
    from edgeopt.converters.base import Intermediate

    work = Path(ctx.work_dir) / "early_exit" / SCRATCH
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    saved = ctx.artifact_dir
    try:
        ctx.artifact_dir = work
        out = run_stage(stage, spec, Intermediate(inter.path, inter.format, inter.precision,
                                                  {k: v for k, v in inter.notes.items() if k != "cascade"}), ctx)
    finally:
        ctx.artifact_dir = saved
    return out


def _manifest_of(model_path: Path, runtime: dict) -> dict:
    import onnx

    from edgeopt.model import graph_inputs, graph_outputs

    proto = onnx.load(str(model_path), load_external_data=False)
    io = {kind: [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in specs]
          for kind, specs in (("inputs", graph_inputs(proto)), ("outputs", graph_outputs(proto)))}
    return {"runtime": runtime, **io}


def measure(root: Path, plain_dir: Path, plain_manifest: dict, dataset, threads: int | None = None) -> dict:
    """{"cascade_ms", "plain_ms", "ratio", "samples", "timed_with", ...}: mean latency over the first samples of
    ``dataset``, the cascade in ``root`` against the plain artifact in ``plain_dir``, in their runtime, timed as
    ``bench --inputs`` times them (:func:`edgeopt.runtime.cascade.time_over_inputs`), with the run's ``--threads``
    (None: the runtime's default, as bench's)."""
    from edgeopt.runtime.cascade import CASCADE_FILE, time_over_inputs
    from edgeopt.runtime.runners import open_runner

    manifest = {"runtime": {"cascade": CASCADE_FILE}, "inputs": [], "outputs": []}
    cascade = open_runner(str(root), threads=threads, manifest=manifest)
    plain = open_runner(str(plain_dir), threads=threads, manifest=plain_manifest)
    n = min(SAMPLES, len(dataset))
    try:
        t = time_over_inputs(cascade, [dataset.feed(i) for i in range(n)], repeats=REPEATS, plain=plain)
    finally:
        cascade.close()
        plain.close()
    backend = plain_manifest["runtime"]["backend"]
    return {"cascade_ms": t["mean_ms"], "plain_ms": t["plain_mean_ms"], "ratio": t["mean_vs_plain"], "samples": n,
            "worst_case_ms": t["worst_case_ms"], "backend": backend, "threads": threads,
            "timed_with": f"{backend} (the artifacts as written), {threads or 'default'} thread(s), this host, each "
                          f"sample the median of {REPEATS} runs, alternately"}


def keep_or_plain(root: Path, draft: dict, plain, ctx):
    """None where the cascade in ``root`` pays in the backend's runtime (the stage report says so); else the plain
    model (``plain``, from :func:`plain_by_backend`) replaces it in ``root`` and its Intermediate is returned."""
    report = draft["report"]
    work = Path(ctx.work_dir) / "early_exit" / SCRATCH
    plain_manifest = _manifest_of(draft["model"], plain.notes["runtime"])
    m = report["measured"] = measure(root, work, plain_manifest, draft["measure_data"], ctx.threads)
    predicted = draft["predicted_mean_ms"]
    j = report["held_back_as_written"] = judge_as_written(root, draft)
    if not j["holds"]:  # the held-back half confirms the cascade as written, with the convert gate's judge
        return _plain(root, draft, plain, ctx, work, f"the cascade as written by {m['backend']} misses the bound on "
                      f"the held-back half: drop {j['drop_points']:.2f} points, up to {j['drop_upper_points']:.2f} "
                      f"at {j['confidence']} confidence > {j['max_accuracy_drop']} ({j['samples']} samples)")
    if m["ratio"] <= 1 - draft["min_gain"]:
        report["verdict"] = {"early_exit": True, "exits": len(draft["stages"]) - 1,
                             "why": f"measured mean {m['cascade_ms']:.3f} ms vs {m['plain_ms']:.3f} ms plain in "
                                    f"{m['backend']} (predicted {predicted:.3f} ms; stage costs: {draft['costed_with']})"}
        shutil.copytree(work, root / PLAIN_DIR)  # kept: bench times the cascade against it as convert did
        draft["plain"] = {"dir": PLAIN_DIR, **plain_manifest}
        return None
    return _plain(root, draft, plain, ctx, work,
                  f"the exits don't pay once run: measured mean {m['cascade_ms']:.3f} ms vs {m['plain_ms']:.3f} ms "
                  f"plain in {m['backend']} over {m['samples']} held-back samples ({m['timed_with']}; predicted "
                  f"{predicted:.3f} ms; stage costs: {draft['costed_with']})")


def _plain(root: Path, draft: dict, plain, ctx, work: Path, why: str):
    """The plain model's files (in ``work``) replace the cascade's in ``root``; the report and a warning say why."""
    from edgeopt.converters.base import Intermediate

    draft["report"]["verdict"] = {"early_exit": False, "why": why}
    ctx.warn(f"early exit: the plain model is written: {why}")
    dirs = {s["entry"]["dir"] for s in draft["stages"]}
    for path in root.iterdir():  # the stage folders, cascade.json, load.py: the plain model's files replace them
        if path.name in dirs and path.is_dir():
            shutil.rmtree(path)
        elif path.name in ("cascade.json", "load.py"):
            path.unlink()
    shutil.copytree(work, root, dirs_exist_ok=True)
    notes = {**plain.notes, "cascade": None}
    return Intermediate(root / Path(plain.path).relative_to(work), plain.format, plain.precision, notes)


def judge_as_written(root: Path, draft: dict) -> dict:
    """The cascade as the backend wrote it (INT8 stages shift the exits' confidences) on the held-back half of
    ``--eval``, against the model without exits in ONNX, by the run's metric (:mod:`.answers`: labels for top-1;
    the model's own answer without them, and always for ordered bins): the drop and its upper confidence limit
    (Tango's, as the convert gate)."""
    from edgeopt.converters.early_exit.answers import agrees, answers
    from edgeopt.metrics.base import MetricName
    from edgeopt.metrics.confidence import paired_upper
    from edgeopt.runtime.cascade import CASCADE_FILE
    from edgeopt.runtime.reference import session
    from edgeopt.runtime.runners import open_runner

    data, output, kind = draft["measure_data"], draft["output"], draft.get("kind", MetricName.TOP1)
    reference = session(draft["model"], threads=1)
    cascade = open_runner(str(root), threads=1, manifest={"runtime": {"cascade": CASCADE_FILE}, "inputs": [],
                                                          "outputs": []})
    ref, got = [], []
    try:
        for i in range(len(data)):
            feeds = data.feed(i)
            ref.append(np.asarray(reference.run([output], feeds)[0]).reshape(1, -1))
            got.append(np.asarray(cascade.run(feeds)[output]).reshape(1, -1))
    finally:
        cascade.close()
    ref, got = answers(kind, np.concatenate(ref)), answers(kind, np.concatenate(got))
    labelled = data.labels is not None and kind != MetricName.ORDERED_BINS
    truth = np.asarray(data.labels).ravel()[: len(ref)] if labelled else ref
    ref_ok, got_ok = agrees(kind, ref, truth), agrees(kind, got, truth)
    lost, gained = int((ref_ok & ~got_ok).sum()), int((~ref_ok & got_ok).sum())
    n, bound, level = len(ref), draft["max_drop"], draft["confidence"]
    upper = paired_upper(lost, gained, n, level)
    return {"samples": n, "drop_points": round(100.0 * (lost - gained) / max(n, 1), 3),
            "drop_upper_points": round(upper, 3), "confidence": level, "max_accuracy_drop": bound,
            "agreement": round(100.0 * float(agrees(kind, ref, got).mean()), 2), "holds": bool(upper <= bound + 1e-9)}

