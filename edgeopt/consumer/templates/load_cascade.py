# The early-exit part of a staged artifact's load.py (joined after the backend's part, before the command line):
# cascade.json lists the stages in order; each but the last gives the tensor the next one takes and an exit head's
# logits, and a sample leaves at the first exit whose max softmax (in float64, as edgeopt's runner computes it)
# reaches the threshold. Each stage is opened by the backend's own load() with that stage's model, settings and io
# map, so a stage runs exactly as a whole model of that backend would. A batch is run one sample at a time.
import json
import os

import numpy as np

CASCADE = "cascade.json"
EXIT_STAGE = "exit_stage"  # an extra output: the index of the stage each sample left at (the last: the full model)
load_stage = load  # noqa: F821 - the backend's load() above, for one stage


def open_stage(folder: str, runtime: dict, bare: bool):
    """The backend's run function for the stage whose files are in ``folder`` (its ``runtime`` entry of
    cascade.json: model, settings, io map)."""
    global MODEL, SETTINGS, IO
    MODEL, SETTINGS, IO = runtime["model"], runtime.get("settings") or {}, runtime.get("io") or {}
    return load_stage(folder, bare=bare)


def softmax64(x):
    z = np.asarray(x, np.float64).reshape(len(x), -1)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def load(model_dir=None, *, bare=False):
    """A function running the cascade on numpy arrays keyed by the ONNX input names: the output of the exit the
    sample left at (its probabilities or logits, as the model gives them) and ``exit_stage``."""
    root = model_dir or HERE  # noqa: F821 - the backend part's
    with open(os.path.join(root, CASCADE)) as f:
        cascade = json.load(f)
    stages = [(s, open_stage(os.path.join(root, s["dir"]), s["runtime"], bare)) for s in cascade["stages"]]
    as_probs = cascade["scores"] == "probabilities"

    def run(feeds: dict) -> dict:
        rows = len(next(iter(feeds.values())))
        if rows > 1:  # each sample leaves on its own
            each = [run({k: v[i:i + 1] for k, v in feeds.items()}) for i in range(rows)]
            return {k: np.concatenate([e[k] for e in each]) for k in each[0]}
        for k, (spec, stage) in enumerate(stages):
            outs = stage(feeds)
            if spec.get("exit_output") is None:
                return {cascade["output"]: outs[cascade["output"]], EXIT_STAGE: np.asarray([k])}
            logits = outs[spec["exit_output"]]
            probs = softmax64(logits)
            if probs.max() >= spec["threshold"]:
                scores = probs.astype(np.float32).reshape(np.shape(logits)) if as_probs else logits
                return {cascade["output"]: scores, EXIT_STAGE: np.asarray([k])}
            feeds = {spec["feature"]: outs[spec["feature"]]}
        raise AssertionError("the last stage has no exit")

    last = stages[-1][1]
    run.applied = {**last.applied, "stages": len(stages)}
    run.settings = last.settings  # the settings this load applied (each stage's are the same)
    return run
