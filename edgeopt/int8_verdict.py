"""The result of an INT8 conversion said plainly: an artifact labelled int8 that quantizes under half of its compute
units (:func:`edgeopt.quant_units.count_units`, the validation's ``units``) and is no faster than FP32 (the INT8
search's quick timing, its ``speed`` report) is INT8 in name only. ``convert`` says so as its result (its summary
line and its JSON ``verdict``), not as one warning among others: the user asked for a faster model and got FP32 with
a few quantized ops."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeopt.manifest_types import StageEntry

NAME_ONLY_SHARE = 0.5  # quantized units under this share of the compute units
NOT_FASTER = 1.05  # a speed-up under this over FP32 is no speed-up (the speed verdict's own line)


def _speedup(obj) -> float | None:
    """The last ``speed.speedup_vs_fp32`` in a stage report (nested anywhere): the chosen artifact's quick timing."""
    found = None
    if isinstance(obj, dict):
        speed = obj.get("speed")
        if isinstance(speed, dict) and isinstance(speed.get("speedup_vs_fp32"), (int, float)):
            found = float(speed["speedup_vs_fp32"])
        values = [v for k, v in obj.items() if k != "speed"]
    else:
        values = obj if isinstance(obj, list) else []
    for value in values:
        sub = _speedup(value)
        found = sub if sub is not None else found
    return found


def int8_verdict(precision: str | None, units: dict | None, stages: list[StageEntry],
                 measured: float | None = None) -> str | None:
    """"INT8 in name only: …" for an int8 artifact with under half of its compute units quantized that runs no
    faster than FP32 (``measured`` on the written artifact where convert measured it, else the search's quick
    timing); "mostly float: …" for one with under half quantized that was not timed here (no speed claim either
    way); None otherwise (or without the units)."""
    if precision != "int8" or not units:
        return None
    quantized, total = int(units.get("quantized") or 0), int(units.get("quantized") or 0) + int(units.get("float") or 0)
    if not total or quantized >= NAME_ONLY_SHARE * total:
        return None
    speedup = measured if measured is not None else _speedup([s.report for s in stages])
    if speedup is None:  # not timed here (an ARM board's artifact): the share is a fact, the speed is unknown
        return (f"mostly float: {quantized} of {total} compute ops in {units.get('file')} are quantized (the rest "
                "kept in float to hold the bound), and its speed was not measured here: time it on the device "
                "(edgeopt remote-bench) before counting on a gain; --precision fp32 may be as fast")
    if speedup >= NOT_FASTER:
        return None
    return (f"INT8 in name only: {quantized} of {total} compute ops in {units.get('file')} are quantized and it runs "
            f"x{speedup:g} vs FP32 here ({'measured on it' if measured is not None else 'quick estimate'}, no faster): --precision fp32 gives as fast a model without "
            "the accuracy risk")
