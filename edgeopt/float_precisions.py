"""Which float precisions a device runs natively, fastest first: the candidates when no INT8 holds the bound.

FP16 is native where the unit the backend targets computes FP16 faster than FP32 (the profile's ``peak_gops``:
a GPU's tensor cores, an ARMv8.2 core with FP16 arithmetic such as pi5's Cortex-A76, not rpi4's A72) and the
backend can write FP16. FP32 is always last: every backend writes it and it holds any bound of its own model.
"""

from __future__ import annotations

from edgeopt.enums import BackendName, Precision


def native_float_precisions(profile, backend: BackendName | str) -> list[Precision]:
    """The float precisions ``backend`` can write for ``profile`` (a DeviceProfile), fastest first, FP32 last."""
    from edgeopt.converters.registry import get_backend

    offered = get_backend(BackendName(backend)).precisions
    target = next((t for t in profile.backends if t.name == BackendName(backend)), None)
    units = [u for u in profile.compute_units if target is None or u.kind == target.unit] or list(profile.compute_units)
    found = []
    peak = units[0].peak_gops
    if Precision.FP16 in offered and (peak.fp16 or 0) > (peak.fp32 or 0):
        found.append(Precision.FP16)
    return [*found, Precision.FP32]
