"""``init_recipe``: a commented starter ``edgeopt.yaml`` for a model, inputs read from the model."""

from __future__ import annotations

import os
from pathlib import Path

from edgeopt.errors import OutputExistsError
from edgeopt.files import write_text_atomic

_TEMPLATE = """\
# edgeopt pipeline recipe: build with `edgeopt pipeline run {recipe_name}`.
# Paths are relative to this file. Unknown keys are errors (with a "did you mean" hint).
version: 1

model:
  path: {model}
  # from_torch: package.module:factory   # instead of path: a torch.nn.Module factory ...
  # weights: weights.pt                  # ... and its state dict
  inputs:                                # static shapes, read from the model{dynamic_note}
{inputs}
  # preprocess: resize=224x224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,scale=255   # image folders only

data:
  calib: {calib}      # INT8 calibration: .npz with one array per input (named like it), or an image folder
  eval: {eval}        # validation: .npz with the inputs and 'labels' (gives the accuracy drop)

output: dist          # one artifact dir + tarball per target, summary.json, report.html

gates:                # a target that misses one is not packaged; the run exits 5
  {acc_gate}max_accuracy_drop: 1.0      # top-1 points lost vs FP32 (needs labels in data.eval)
  # max_p99_latency_ms: 10    # measured with --bench local, else the roofline estimate (latency_source)
  # latency_source: auto      # auto | measured | estimated
  # max_artifact_kb: 512      # sum of the artifact's files, KiB
  # max_ram_mb: 64            # measured RSS growth at load, else estimated (files + peak activations)

bench:                # --bench local: short interleaved runs of every target
  min_runs: 30
  min_seconds: 0.5

targets:              # one artifact per target; options as in `edgeopt convert`
  - name: {profile}-onnxruntime-int8
    profile: {profile}           # a device profile name (edgeopt profiles list) or a YAML file
    backend: onnxruntime         # onnxruntime | openvino | tflite | tvm
    precision: int8              # int8 | bf16 | fp16 | fp32
    # prune: 0.3                 # fraction of conv channels to remove
    # calib_method: minmax       # minmax | percentile
    # per_channel: true
    # accuracy_aware: false      # INT8 that keeps sensitive layers in float to meet max_accuracy_drop
    # stages: {{qdq: {{calib_samples: 128}}}}   # per-stage config overrides
    # gates: {{max_artifact_kb: 256}}               # this target's own gates
"""


def _rel(p: Path | None, base: Path, default: str) -> str:
    if p is None:
        return default
    return os.path.relpath(Path(p).resolve(), base)


def init_recipe(model: str | os.PathLike, output: str | os.PathLike = "edgeopt.yaml", *, profile: str = "host",
                calib: str | os.PathLike | None = None, eval: str | os.PathLike | None = None,
                force: bool = False) -> dict:
    """Write the starter recipe for ``model`` to ``output`` (atomically); returns what it holds."""
    from edgeopt.model import graph_inputs, load_onnx

    out = Path(output)
    if out.exists() and not force:
        raise OutputExistsError(f"'{out}' exists", "use --force to replace it")
    specs = graph_inputs(load_onnx(model))
    base = out.resolve().parent
    lines, dynamic = [], []
    for s in specs:
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in s.shape]
        if dims != list(s.shape):
            dynamic.append(s.name)
        lines.append(f"    {s.name}: [{', '.join(str(d) for d in dims)}]" + ("   # dynamic dims set to 1: check"
                                                                            if dims != list(s.shape) else ""))
    text = _TEMPLATE.format(
        recipe_name=out.name, model=_rel(Path(model), base, ""), inputs="\n".join(lines) or "    {}",
        dynamic_note="; dynamic dims were set to 1" if dynamic else "",
        calib=_rel(Path(calib) if calib else None, base, "null"),
        eval=_rel(Path(eval) if eval else None, base, "null"), profile=profile, acc_gate="" if eval else "# ")
    write_text_atomic(out, text)
    return {"recipe": str(out), "model": str(model), "inputs": {s.name: list(s.shape) for s in specs},
            "dynamic_inputs": dynamic, "profile": profile}
