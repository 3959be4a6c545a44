"""Run this early-exit artifact with numpy and its runtime alone.

    python load.py INPUTS.npz      # prints each sample's class and the stage it left at

``cascade.json`` lists the stages in order: each but the last gives the tensor the next one takes and an exit
head's logits; a sample leaves at the first exit whose max softmax reaches the threshold. How one stage is opened
in the artifact's runtime (``open_backend_stage``) is inserted before the script's part.
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def open_stage(stage):
    """A function feeds -> outputs (dicts by ONNX name) for one stage, with the runtime its files are for."""
    return open_backend_stage(os.path.join(HERE, stage["dir"]), stage["runtime"])  # noqa: F821 (appended below)


def softmax(x):
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def load():
    """A function (feeds of one sample) -> (scores, index of the stage it left at)."""
    with open(os.path.join(HERE, "cascade.json")) as f:
        cascade = json.load(f)
    stages = [(s, open_stage(s)) for s in cascade["stages"]]

    def run(feeds):
        for k, (spec, stage) in enumerate(stages):
            outs = stage(feeds)
            if spec.get("exit_output") is None:
                return outs[cascade["output"]], k
            probs = softmax(outs[spec["exit_output"]])
            if probs.max() >= spec["threshold"]:
                return (probs if cascade["scores"] == "probabilities" else outs[spec["exit_output"]]), k
            feeds = {spec["feature"]: outs[spec["feature"]]}
        raise AssertionError("the last stage has no exit")
    return run


if __name__ == "__main__":
    data = np.load(sys.argv[1])
    run = load()
    names = [k for k in data.files if k != "labels"]
    for i in range(len(data[names[0]])):
        scores, stage = run({k: data[k][i:i + 1] for k in names})
        print(int(np.argmax(scores)), stage)
