# The command line of a generated load.py: --inputs x.npz (arrays named after the model's inputs: one input, or a
# stack of samples along a new first axis) --outputs y.npz (each output; stacked likewise); --bare loads the model
# with the runtime's defaults only (what a user who ignores this file gets). It prints one JSON line: what the
# runtime reports it applied and the settings it was given.
import argparse
import json
import sys

import numpy as np

INPUTS: list = []  # the model's inputs: name, shape, dtype (filled in from the manifest)


def sample_count(data) -> int:
    spec = INPUTS[0]
    arr, rank = data[spec["name"]], len(spec["shape"])
    return len(arr) if arr.ndim == rank + 1 else 1


def contiguous(v):
    """C-contiguous with its shape kept (``np.ascontiguousarray`` makes a 0-d input, such as a sample rate, 1-d)."""
    v = np.asarray(v)
    return v if v.flags.c_contiguous else np.ascontiguousarray(v)


def sample(data, index: int) -> dict:
    """Sample ``index`` of each input (a leading sample axis taken off), in the input's dtype."""
    feeds = {}
    for spec in INPUTS:
        arr = data[spec["name"]]
        arr = arr[index] if arr.ndim == len(spec["shape"]) + 1 else arr
        feeds[spec["name"]] = np.asarray(arr, dtype=spec["dtype"])
    return feeds


def main(load, argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run the model with the settings it was judged at.")
    parser.add_argument("--inputs", required=True, help=".npz with one array per model input")
    parser.add_argument("--outputs", required=True, help=".npz written with one array per model output")
    parser.add_argument("--bare", action="store_true", help="the runtime's defaults only, none of the settings")
    args = parser.parse_args(argv)
    model = load(bare=args.bare)
    with np.load(args.inputs) as data:
        runs = [model(sample(data, i)) for i in range(sample_count(data))]
        stacked = len(INPUTS) and data[INPUTS[0]["name"]].ndim == len(INPUTS[0]["shape"]) + 1
    outputs = {k: np.stack([r[k] for r in runs]) if stacked else runs[0][k] for k in runs[0]}
    np.savez(args.outputs, **outputs)
    print(json.dumps({"applied": model.applied, "settings": model.settings, "samples": len(runs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(load))  # noqa: F821 - load is the runtime part's, above this part in load.py
