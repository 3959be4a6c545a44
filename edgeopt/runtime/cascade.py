"""The cascade runner: an early-exit artifact (``cascade.json`` beside one model per stage) run stage by stage.

Each stage but the last gives the tensor the next stage takes and its exit head's logits; a sample leaves at the
first exit whose confidence (max softmax) reaches that exit's threshold. Samples of a batch leave separately: the
later stages run only on those still inside. ``exit_counts`` counts where samples left (the last entry: the full
model), and ``last_exits`` says it for the last call. Standard library + numpy + the stages' runtime.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .runners.base import Runner

CASCADE_FILE = "cascade.json"


def read_cascade(artifact_dir: str) -> dict:
    with open(os.path.join(artifact_dir, CASCADE_FILE)) as f:
        return json.load(f)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class CascadeRunner(Runner):
    """Runs the stages of an early-exit artifact, each with the runner of its backend."""

    def __init__(self, artifact_dir: str, manifest: dict, threads: int | None = None, open_runner=None):
        """``open_runner``: opens one stage (``runners.open_runner``, passed in so the two modules don't import
        each other)."""
        super().__init__(artifact_dir, manifest, threads=threads)
        self.cascade = read_cascade(artifact_dir)
        self.stages = []
        for s in self.cascade["stages"]:
            sub = {"runtime": s["runtime"], "inputs": s["inputs"], "outputs": s["outputs"]}
            self.stages.append(open_runner(os.path.join(artifact_dir, s["dir"]), threads=threads, manifest=sub))
        self.exit_counts = [0] * len(self.stages)
        self.last_exits = np.zeros(0, dtype=np.int64)

    def run(self, feeds: dict[str, np.ndarray], every_stage: bool = False) -> dict[str, np.ndarray]:
        """The outputs for ``feeds``; ``every_stage``: no sample leaves early (every stage and every head run: the
        worst case)."""
        output, as_probs = self.cascade["output"], self.cascade["scores"] == "probabilities"
        n = len(next(iter(feeds.values())))
        rows = np.arange(n)
        result, exits = None, np.full(n, len(self.stages) - 1)
        current = feeds
        for k, (spec, stage) in enumerate(zip(self.cascade["stages"], self.stages, strict=True)):
            outs = stage.run(current)
            if spec.get("exit_output") is None:
                scores = outs[output]
                leave = np.ones(len(rows), dtype=bool)
            else:
                probs = softmax(np.asarray(outs[spec["exit_output"]]).reshape(len(rows), -1))
                leave = (probs.max(axis=1) >= spec["threshold"]) & (not every_stage)
                scores = probs if as_probs else outs[spec["exit_output"]]
            if result is None:
                result = np.zeros((n, *np.shape(scores)[1:]), dtype=np.float32)
            result[rows[leave]] = np.asarray(scores)[leave]
            exits[rows[leave]] = k
            self.exit_counts[k] += int(leave.sum())
            rows = rows[~leave]
            if len(rows) == 0:
                break
            keep = ~leave
            current = {spec["feature"]: np.ascontiguousarray(outs[spec["feature"]][keep])}
        self.last_exits = exits
        return {output: result}

    def close(self) -> None:
        for stage in self.stages:
            stage.close()


PLAIN_DIR = "plain"  # the same model without exits, as the backend wrote it: what the exits are timed against


def open_plain(artifact_dir: str, open_runner, threads: int | None = None) -> Runner | None:
    """The runner of the model without exits kept beside the stages (``plain/``, described in ``cascade.json``'s
    ``plain``), or None where the artifact has none (an older one, or a user who removed it). ``open_runner``:
    ``runners.open_runner``, passed in as to :class:`CascadeRunner`."""
    plain = read_cascade(artifact_dir).get("plain")
    path = os.path.join(artifact_dir, plain["dir"]) if plain else None
    if not path or not os.path.isdir(path):
        return None
    return open_runner(path, threads=threads, manifest={k: plain[k] for k in ("runtime", "inputs", "outputs")})


def time_over_inputs(runner: CascadeRunner, samples: list[dict], repeats: int = 3, plain: Runner | None = None) -> dict:
    """Latency of the cascade over ``samples`` (one feed each): the mean, each exit's share and mean latency, the
    worst case (every stage and every head), and each sample's time (the median of ``repeats`` runs) with the
    stage it left at (the report draws their distribution per exit). With ``plain`` (the model without exits), each
    sample is timed on it too, right after the cascade: ``plain_mean_ms`` and ``mean_vs_plain`` compare the two
    over the same samples in the same process (convert and bench both measure so)."""
    import time

    def timed(run, feeds) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run(feeds)
            times.append(time.perf_counter() - t0)
        return float(np.median(times) * 1000.0)

    per_sample, exits, plain_ms = [], [], []
    for feeds in samples:
        runner.run(feeds)  # warm
        per_sample.append(timed(runner.run, feeds))
        exits.append(int(runner.last_exits[0]))
        if plain is not None:
            plain.run(feeds)
            plain_ms.append(timed(plain.run, feeds))
    worst = [timed(lambda f: runner.run(f, every_stage=True), feeds)
             for feeds in samples[: max(1, min(len(samples), 20))]]
    exits_a, ms = np.asarray(exits), np.asarray(per_sample)
    stages = []
    for k in range(len(runner.stages)):
        mask = exits_a == k
        stages.append({"exit": k if k < len(runner.stages) - 1 else "full", "share": round(float(mask.mean()), 4),
                       "mean_ms": round(float(ms[mask].mean()), 4) if mask.any() else None})
    out = {"samples": len(samples), "mean_ms": round(float(ms.mean()), 4), "exits": stages,
           "worst_case_ms": round(float(np.median(worst)), 4), "repeats": repeats,
           "per_sample_ms": [round(float(v), 4) for v in ms], "per_sample_exit": [int(k) for k in exits_a]}
    if plain_ms:
        out["plain_mean_ms"] = round(float(np.mean(plain_ms)), 4)
        out["mean_vs_plain"] = round(float(ms.mean() / np.mean(plain_ms)), 3)
    return out
