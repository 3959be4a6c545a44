"""Cross-layer equalization of depthwise -> pointwise convolution pairs, before INT8 calibration.

In depthwise-separable networks (MobileNet, BlazeFace, the palm detector) a depthwise convolution's output channels
can differ in range by 100x or more (BlazeFace's last depthwise outputs: one channel near 400, most under 5), while
its output is quantized with one scale for all channels: the small channels are wiped out. When the depthwise
output feeds only a convolution (no activation between, as in these blocks), channel ``c`` can be divided by
``s_c`` and the reader's input channel ``c`` multiplied by ``s_c`` without changing what the model computes (Nagel
et al., "Data-Free Quantization Through Weight Equalization and Bias Correction", 2019). ``s_c`` is chosen so the
channel's activation range (measured on calibration samples) and the reader's weight range for it meet at their
geometric mean, the two then quantizing equally well.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

EQUALIZE_SAMPLES = 32  # calibration samples whose per-channel ranges set the scales


def _attr(node, name: str, default):
    return next((a.i for a in node.attribute if a.name == name), default)


def equalizable_pairs(model) -> list[tuple[object, object]]:
    """(depthwise Conv, the Conv reading it) pairs: the depthwise one with a constant weight ``[C,1,kh,kw]`` and
    ``group == C > 1``, whose output is read by that one group-1 Conv with a constant weight and by nothing
    else (not a model output either)."""
    from onnx import numpy_helper

    g = model.graph
    init = {t.name: t for t in g.initializer}
    readers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    pairs = []
    for n in g.node:
        if n.op_type != "Conv" or len(n.input) < 2 or n.input[1] not in init or n.output[0] in outputs:
            continue
        w = init[n.input[1]].dims
        if len(w) != 4 or w[1] != 1 or _attr(n, "group", 1) != w[0] or w[0] < 2:
            continue
        nxt = readers.get(n.output[0], [])
        if len(nxt) != 1 or nxt[0].op_type != "Conv" or nxt[0].input[0] != n.output[0]:
            continue
        p = nxt[0]
        if len(p.input) < 2 or p.input[1] not in init or _attr(p, "group", 1) != 1:
            continue
        if numpy_helper.to_array(init[p.input[1]]).shape[1] == w[0]:
            pairs.append((n, p))
    return pairs


def channel_ranges(model, outputs: list[str], calib, input_names: list[str], samples: int) -> list[np.ndarray]:
    """Per output tensor, the largest |value| of each channel (axis 1) over ``samples`` calibration samples, run
    in the reference runtime on ``model`` with those tensors added as outputs."""
    from edgeopt.runtime.reference import session, with_outputs

    sess = session(with_outputs(model, outputs))
    ranges: list[np.ndarray | None] = [None] * len(outputs)
    for feed in calib.feeds(min(samples, len(calib))):
        res = sess.run(list(outputs), {k: np.asarray(v) for k, v in feed.items() if k in input_names})
        for j in range(len(outputs)):
            a = np.abs(np.asarray(res[j], np.float64))
            r = a.max(axis=tuple(k for k in range(a.ndim) if k != 1))
            ranges[j] = r if ranges[j] is None else np.maximum(ranges[j], r)
    return ranges


def balance(act_range: np.ndarray, weight_range: np.ndarray) -> np.ndarray:
    """The per-channel scales ``s``: the activation range divided by ``s`` and the reader's weight range times
    ``s`` meet at their geometric mean; channels without a range keep 1; normalised to a geometric mean of 1."""
    live = (act_range > 1e-12) & (weight_range > 1e-12)
    s = np.where(live, np.sqrt(np.where(live, act_range, 1.0) / np.where(live, weight_range, 1.0)), 1.0)
    return s / np.exp(np.mean(np.log(s)))


def equalize(src: Path, dst: Path, calib, input_names: list[str], samples: int = EQUALIZE_SAMPLES) -> int:
    """Write ``src`` with every :func:`equalizable_pairs` pair rescaled (:func:`balance`) to ``dst``; returns the
    number of pairs (0: ``dst`` is a copy). What the model computes is unchanged up to float rounding."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    pairs = equalizable_pairs(model)
    init = {t.name: t for t in model.graph.initializer}
    ranges = channel_ranges(model, [d.output[0] for d, _ in pairs], calib, input_names, samples) if pairs else []

    def put(name: str, arr: np.ndarray) -> None:
        init[name].CopyFrom(numpy_helper.from_array(arr.astype(numpy_helper.to_array(init[name]).dtype), name))

    for (dw, pw), act in zip(pairs, ranges, strict=True):
        w1, w2 = numpy_helper.to_array(init[dw.input[1]]), numpy_helper.to_array(init[pw.input[1]])
        s = balance(act, np.abs(w2).max(axis=(0, *range(2, w2.ndim))))
        put(dw.input[1], w1 / s.reshape(-1, 1, 1, 1))
        put(pw.input[1], w2 * s.reshape(1, -1, *([1] * (w2.ndim - 2))))
        if len(dw.input) > 2 and dw.input[2] in init:
            put(dw.input[2], numpy_helper.to_array(init[dw.input[2]]) / s)
    onnx.save(model, str(dst))
    return len(pairs)
