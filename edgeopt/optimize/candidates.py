"""The candidates of ``optimize``'s precision steps, from the graph and the profile alone (nothing is built here):

- ``int8``: each INT8 mode x backend the profile lists and that is installed, where the mode fits the graph as
  ``--quant-mode auto`` decides it (:func:`edgeopt.converters.quantize.dynamic.dynamic_decision`): a
  MatMul/LSTM/GRU-heavy graph tries dynamic and weight-only beside static, a convolutional one static only;
  each mode the backend's quantizer offers (its ``Quantizer.modes``), pinned with ``quant_mode``. A backend
  without a quantizer of its own (TVM: the chain's ONNX Runtime QDQ) gets one unpinned INT8 candidate;
- ``float``: each native float precision x backend (:func:`edgeopt.float_precisions.native_float_precisions`:
  bf16 on AMX/AVX512-BF16 CPUs for OpenVINO, fp16 on GPUs and ARMv8.2 FP16), fp32 on the other backends too.

Also the fields helpers the search shares: :func:`folded` (pruning starts from the fused graph) and
:func:`dropped_why` (each waterfall row's verdict).
"""

from __future__ import annotations

from edgeopt.enums import BackendName, Precision, QuantMode
from edgeopt.runtime.reference import REFERENCE

QDQ_CALIB_METHODS = ("minmax", "percentile")  # the shared Q/DQ stage's static INT8: both tried, per-channel
_PRECISION_KEYS = ("backend", "precision", "quant_mode", "calib_method", "per_channel", "accuracy_aware")


def base_fields(fields: dict) -> dict:
    """``fields`` without what a precision candidate sets itself (backend, precision, mode, calibration)."""
    return {k: v for k, v in fields.items() if k not in _PRECISION_KEYS}


def fitting_modes(proto, backend: str) -> tuple[list[QuantMode], str]:
    """The INT8 modes of ``backend`` that fit the graph (``[AUTO]``: the backend pins none), and why."""
    from edgeopt.converters.quantize.dynamic import dynamic_decision
    from edgeopt.converters.registry import get_backend, resolve

    bcls = get_backend(BackendName(backend))
    if not bcls.quantizer:
        return [QuantMode.AUTO], f"{backend} has no quantizer of its own (the chain's INT8 before it)"
    offered = resolve(bcls.quantizer).modes
    pays, why, mix = dynamic_decision(proto)
    if not pays and mix["nodes"]["dynamic"]:  # the backend-neutral part of the reason (ORT's ConvInteger is one case)
        n = mix["nodes"]
        why = (f"a convolutional model ({n['conv']} Conv vs {n['dynamic']} MatMul/Gemm/LSTM/GRU nodes, "
               f"{mix['matmul_lstm_gru_share']:.0%} of the weights in the latter): static INT8 fits it")
    wanted = (QuantMode.DYNAMIC, QuantMode.WEIGHTS, QuantMode.STATIC) if pays else (QuantMode.STATIC,)
    return [m for m in wanted if m in offered], why


def int8_options(proto, backends: list[str], base: dict) -> tuple[list[dict], list[str]]:
    """(the fields of each INT8 candidate, a note per backend on the modes not tried and why)."""
    from edgeopt.converters.registry import get_backend, resolve

    options, notes = [], []
    for b in backends:
        modes, why = fitting_modes(proto, b)
        bcls = get_backend(BackendName(b))
        offered = resolve(bcls.quantizer).modes if bcls.quantizer else ()
        left = [m.value for m in offered if m not in modes]
        if left:
            notes.append(f"int8 {b}: {', '.join(left)} not tried: {why}")
        for m in modes:
            f = {**base, "backend": b, "precision": Precision.INT8.value}
            if m != QuantMode.AUTO:
                f["quant_mode"] = m.value
            if bcls.quantizes_itself or m in (QuantMode.DYNAMIC, QuantMode.WEIGHTS):
                options.append(f)
            else:  # the shared Q/DQ stage's static INT8: its calibration methods are candidates too
                options += [{**f, "calib_method": cm, "per_channel": True} for cm in QDQ_CALIB_METHODS]
    return options, notes


def accuracy_aware_option(closest: dict, base: dict) -> dict:
    """The accuracy-aware fallback (the mode search, then options and ops in float) on the backend of ``closest``,
    the INT8 candidate that came nearest the bound."""
    from edgeopt.converters.registry import get_backend

    f = {**base, "backend": closest.get("backend", REFERENCE), "precision": Precision.INT8.value,
         "accuracy_aware": True}
    if not get_backend(BackendName(f["backend"])).quantizes_itself:
        f.update(calib_method="minmax", per_channel=True)
    return f


def float_options(profile, backends: list[str], base: dict, *, have: tuple[str, str] = (REFERENCE, "fp32")) \
        -> list[dict]:
    """Each native float precision x backend, fastest first per backend; ``have`` (the incumbent's own
    backend and precision) is left out."""
    from edgeopt.float_precisions import native_float_precisions

    out = []
    for b in backends:
        for p in native_float_precisions(profile, b):
            if (b, p.value) != have:
                out.append({**base, "backend": b, "precision": p.value})
    return out


def folded(fields: dict) -> dict:
    """``fields`` on the fused graph: pruning starts from it whatever the fusion step measured (fusion is lossless,
    and ``--prune auto``'s recovery failed on rapidocr_cls's unfused Conv+BN graph: KeyError on a Conv weight)."""
    stages = {k: dict(v) for k, v in (fields.get("stages") or {}).items()}
    if stages.get("normalize", {}).get("fold") is False:
        del stages["normalize"]["fold"]
        if not stages["normalize"]:
            del stages["normalize"]
    out = {k: v for k, v in fields.items() if k != "stages"}
    return {**out, "stages": stages} if stages else out


def dropped_why(c, winner, bound: float) -> str:
    """Why candidate ``c`` (an ``optimize.result.Candidate``) was not the winner (or that it was), from the final
    figures."""
    from edgeopt.metrics.halves import one_in

    if c.error:
        return f"failed to build: {c.error}"
    if c.note:
        return c.note
    if c.accuracy_drop is None:
        return "accuracy not measured (no real --eval data): not judged against the bound"
    if not c.feasible and c.accuracy_drop <= bound and c.halves_drop_p90 is not None:
        return (f"over the bound on random halves of the eval data: drop {c.accuracy_drop:.2f} on all of it but "
                f"{c.halves_drop_p90:.2f} > {bound:g} points on 1 in {one_in()} halves")
    if not c.feasible and c.accuracy_drop <= bound:
        return f"over the bound with one sample's room: drop {c.accuracy_drop:.2f}, bound {bound:g} points"
    if not c.feasible:
        return f"over the bound: drop {c.accuracy_drop:.2f} > {bound:g} points"
    if winner is None or c.p50_ms is None:
        return "within the bound; not timed"
    if c is winner:
        return "chosen: the fastest within the bound"
    return f"slower: {c.p50_ms:.4f} ms vs {winner.p50_ms:.4f} ms ({winner.label})"


def target_fields(c, **changes) -> dict:
    """Candidate ``c``'s build fields (its target without name and profile), with ``changes``; None values dropped."""
    f = {k: v for k, v in c.target.items() if k not in ("name", "profile")}
    f.update(changes)
    return {k: v for k, v in f.items() if v is not None}


def target_label(f: dict) -> str:
    """The waterfall's name of a build from its fields: backend, precision, mode, calibration, pruning, fusion."""
    parts = [f.get("backend", REFERENCE), f.get("precision", "fp32")]
    if f.get("quant_mode"):
        parts.append(f["quant_mode"])
    calibrated = f.get("quant_mode") not in ("dynamic", "weights")  # those modes calibrate nothing
    if f.get("precision") == "int8" and calibrated and not _backend(parts[0]).quantizes_itself:  # the others: own
        parts.append(f.get("calib_method", "minmax") + (" aa" if f.get("accuracy_aware") else ""))
    elif f.get("accuracy_aware"):
        parts.append("aa")
    if f.get("prune") == "auto":
        parts.append("prune auto" + (" no-recover" if f.get("recover") is False else ""))
    elif f.get("prune"):
        parts.append(f"prune {int(round(f['prune'] * 100))}%" + (" no-recover" if f.get("recover") is False else ""))
    if (f.get("stages") or {}).get("normalize", {}).get("fold") is False:
        parts.append("unfused")
    if f.get("early_exit") == "auto":
        parts.append("early-exit")
    return " ".join(parts)


NAME_MAX = 64  # a target name's length (edgeopt.pipeline.recipe: it names files in dist/)


def target_name(label: str) -> str:
    """The target name of a build labelled ``label``: its words joined by '-', '%' as 'pct'; a longer one than
    ``NAME_MAX`` keeps its start and a short hash of the whole (pruned, INT8 and early exit together run over)."""
    import hashlib

    name = label.replace(" ", "-").replace("%", "pct")
    if len(name) <= NAME_MAX:
        return name
    return name[:NAME_MAX - 9] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]


def _backend(name: str):
    from edgeopt.converters.registry import get_backend

    return get_backend(name)
