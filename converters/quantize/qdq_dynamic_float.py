"""Dynamic INT8 with its most sensitive ops kept in float (ONNX Runtime): the per-op float fallback of the dynamic mode.

Where every dynamic mode misses the bound as built, the search goes on over dynamic per-channel (then per-tensor)
with the ops that lose the most kept in float, as the static search does with its Q/DQ (:mod:`.strategy`: ranked
once, k grown 1, 2, 4, … then bisected, each candidate confirmed on the held-back part). A recurrent model's layers
are few and each carries much of the time, so one of them in float still leaves most of the gain: resemblyzer's
speaker encoder (3 LSTM + Linear) is 2.14 points of 100 − EER over on unseen speech with all four dynamic
(×2.9 ORT FP32, 1 thread), and within 0.1 with its first LSTM, which reads the raw mel powers, in float (×1.87).

Ranking: each weighted op quantized **alone** (every other one excluded), its output error against FP32 (1 − cosine,
:func:`.sensitivity.output_error`) on a few search samples; one quantizer call and a few runs per op, in graph
order until the deadline (ops it had no time for rank last).
"""

from __future__ import annotations

import time
from pathlib import Path

from edgeopt.quant_units import units_of
from edgeopt.runtime.run_fn import run_fn

from .bound import Bounded
from .candidate import SearchResult
from .dynamic import DYNAMIC_OPS
from .modes import DynamicMode, Granularity
from .qdq_quantizer import QdqQuantizer
from .sensitivity import UNRANKED, output_error
from .strategy import run_search

RANK_SAMPLES = 8


def weighted_dynamic_nodes(model_path: Path) -> list[str]:
    """The named MatMul/Gemm/LSTM/GRU/Attention nodes that read a weight (an initializer), in graph order: the ops
    ``quantize_dynamic`` can quantize, and so keep in float by name."""
    import onnx

    g = onnx.load(str(model_path), load_external_data=False).graph
    inits = {i.name for i in g.initializer}
    return [n.name for n in g.node if n.name and n.op_type in DYNAMIC_OPS and any(i in inits for i in n.input)]


def search_dynamic_with_float(model_path: Path, work: Path, b: Bounded, *, bound: float, budget_s: float,
                              grains: tuple[Granularity, ...], progress=None) -> SearchResult:
    """The budgeted search (:func:`.strategy.run_search`) over the dynamic modes ``grains`` as its options, then the
    most sensitive of :func:`weighted_dynamic_nodes` kept in float."""
    quantizer = QdqQuantizer()
    nodes = weighted_dynamic_nodes(model_path)

    def build(g: Granularity, kept: tuple[str, ...], name: str):
        def go():
            path = work / name
            quantizer.quantize(model_path, DynamicMode(granularity=g), path, keep_float=kept)
            return path, run_fn(path, b.threads)
        return go

    def rank(_artifact, deadline: float) -> list[tuple[str, float]]:
        feeds = b.search.feeds(min(RANK_SAMPLES, len(b.search)))
        reference = [b.fp32_run(f) for f in feeds]
        scores = []
        for name in nodes:
            if time.perf_counter() > deadline:
                scores.append((name, UNRANKED))
                continue
            others = tuple(n for n in nodes if n != name)
            _, run = build(grains[0], others, "dynamic-rank.onnx")()
            scores.append((name, output_error(reference, [run(f) for f in feeds])))
        return sorted(scores, key=lambda s: -s[1])

    def with_float(i: int, kept: tuple[str, ...]):
        return build(grains[i], kept, f"dynamic-{grains[i].value}-float{len(kept)}.onnx")

    return run_search(
        options=[(DynamicMode(granularity=g).label(), build(g, (), f"dynamic-{g.value}-asis.onnx")) for g in grains],
        rank=rank, with_float=with_float, fp32_run=b.fp32_run, search=b.search, confirm=b.confirm, bound=bound,
        budget_s=budget_s, progress=progress, what="dynamic INT8 with ops in float (onnxruntime)",
        metric_spec=b.metric, search_path=b.search_path,
        sensitivity_method="each op dynamic INT8 alone, 1 - cosine of the outputs vs FP32",
        quantizes=lambda path: units_of(Path(path))[0] > 0, fallback_bases=len(grains), whole=b.whole,
        confidence=b.confidence, looks=b.looks)
