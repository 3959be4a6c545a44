"""Why the metric must fit the output: one real CTC recogniser, FP32 vs naive static INT8, judged by each metric.

The PP-OCRv4 text recogniser (rapidocr-onnxruntime; ``[1,3,48,320]`` -> CTC logits ``[1,40,6625]``) is converted to
naive static INT8 by ``edgeopt convert --backend onnxruntime --precision int8`` (no accuracy search) with rendered
English text lines as calibration data. On other rendered lines, whose label sequences are known **by
construction** (the model's own character table), the INT8 model is judged by:

* the old fallback: agreement of one argmax over the *flattened* ``40 x 6625`` output (what the search used before
  ``edgeopt.metrics``: one position out of 265,000 per sample);
* ``position_agreement``: argmax along the class axis per position, vs FP32 (what is chosen without labels);
* ``ctc`` vs FP32's reading, and vs the labels (exact match of greedy decoding: the lines read right); ``ctc``
  is also what ``edgeopt.metrics`` chooses here without labels (FP32 emits the blank at most positions);
* ``cosine`` (%) and ``sqnr`` (dB) vs FP32's logits.

    .venv/bin/python bench/metric_choice.py [--lines 48] > out.json

Prints one JSON object. Not a test: no assertions. Data are rendered, not human-labelled.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=48, help="eval lines (as many again for calibration)")
    args = ap.parse_args()
    from test_metrics import rendered_lines_with_ctc_labels

    from edgeopt import api
    from edgeopt.data import Dataset
    from edgeopt.host import cpu_facts
    from edgeopt.metrics import MetricSpec, make_metric
    from edgeopt.runtime.run_fn import run_fn
    from edgeopt.runtime.runners import open_runner
    from fixtures.real_models import package_dir

    rec = package_dir("rapidocr_onnxruntime") / "models" / "ch_PP-OCRv4_rec_infer.onnx"
    x_cal, _ = rendered_lines_with_ctc_labels(rec, args.lines, seed=11)
    x, labels = rendered_lines_with_ctc_labels(rec, args.lines, seed=3)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        np.savez(Path(d) / "calib.npz", x=x_cal)
        np.savez(Path(d) / "eval.npz", x=x, labels=labels)
        t0 = time.perf_counter()
        res = api.convert(str(rec), "host", Path(d) / "int8", backend="onnxruntime", precision="int8",
                          calib=Path(d) / "calib.npz", eval=Path(d) / "eval.npz", input_shapes={"x": (1, 3, 48, 320)})
        convert_s = time.perf_counter() - t0
        fp32 = run_fn(rec, 2)
        ds = Dataset({"x": x}, labels, "rendered lines (labels by construction)", True, {"x": 4})
        unlabelled = Dataset({"x": x}, None, ds.source, True, {"x": 4})
        with open_runner(str(Path(d) / "int8"), threads=2) as runner:
            int8_outs = [runner.run(f) for f in ds.feeds()]
        fp32_outs = [fp32(f) for f in ds.feeds()]
    fp32_outputs_copy = list(fp32_outs)
    flat = [int(np.argmax(next(iter(o.values())))) for o in fp32_outs]
    flat_int8 = [int(np.argmax(next(iter(o.values())))) for o in int8_outs]
    figures = {"flattened_argmax_agreement_with_fp32 (old fallback)":
               {"fp32": 100.0, "int8_naive": 100.0 * float(np.mean(np.equal(flat, flat_int8))), "unit": "%"}}
    for data, spec in ((unlabelled, MetricSpec(name="position_agreement")), (unlabelled, MetricSpec(name="ctc")),
                       (ds, None), (unlabelled, MetricSpec(name="cosine")), (unlabelled, MetricSpec(name="sqnr"))):
        m = make_metric(lambda f, _it=iter(fp32_outs): next(_it), data, spec)
        figures[m.name] = {"fp32": round(m.fp32_value, 3), "int8_naive": round(m.score_outputs(int8_outs), 3),
                           "unit": m.unit, "description": m.description}
    print(json.dumps({
        "benchmark": "metric_choice", "model": "PP-OCRv4 rec (rapidocr-onnxruntime 1.4.4), CTC [1,40,6625]",
        "int8": "naive static INT8, edgeopt convert --backend onnxruntime --precision int8 (no accuracy search)",
        "eval": f"{len(ds)} rendered English text lines, labels by construction; calibration: {len(x_cal)} others",
        "convert_seconds": round(convert_s, 1), "validation_metric": res.validation.get("metric"),
        "chosen_without_labels": make_metric(lambda f, _it=iter(fp32_outputs_copy): next(_it), unlabelled).name,
        "figures": figures,
        "environment": {"cpu": cpu_facts().get("model"), "threads": 2, "load_before": load_before,
                        "load_after": os.getloadavg()},
    }, indent=2))


if __name__ == "__main__":
    main()
