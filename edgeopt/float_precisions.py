"""Which float precisions a profile's unit runs natively on a backend, fastest first (fp32 always last).

Read from profile facts only (the unit the backend targets: its ISA list and stated peaks), so a plan for a board
made here offers what the board has, not what this machine has:

- ``fp16``: the unit computes FP16 faster than FP32 (its ``peak_gops``: a GPU's tensor cores, an NPU), and on a
  CPU only with FP16 arithmetic (ARMv8.2 ``asimdhp``/``fphp``: the Pi 5's Cortex-A76, not the Pi 4's A72;
  x86's AVX512-FP16 is not counted: none of the backends runs a CPU model in fp16 there), on a backend that
  makes fp16 models;
- ``bf16``: a CPU with AMX-BF16 or AVX512-BF16 (``amx_bf16``, ``avx512_bf16``; a stated bf16 peak must beat
  fp32), on a backend that runs a model in bf16 (OpenVINO's CPU plugin, ``INFERENCE_PRECISION_HINT`` bf16); a
  ``Precision.BF16`` artifact says so in its manifest.

The backend's own ``precisions`` descriptor bounds the list. Callers: ``convert``'s precision fallback (when no
INT8 holds, the best float that holds), ``optimize`` (each one a candidate, checked against the bound and kept
only when faster) and ``make_plan`` (``--precision bf16`` where the profile lacks it is exit 2).
"""

from __future__ import annotations

from edgeopt.enums import BackendName, Precision, UnitKind

BF16_FLAGS = ("amx_bf16", "avx512_bf16")
ARM_FP16_FLAGS = ("asimdhp", "fphp")


def _unit(profile, backend: BackendName):
    target = profile.backend(backend)
    return profile.unit(target.unit if target is not None else UnitKind.CPU)


def native_float_precisions(profile, backend: BackendName | str) -> list[Precision]:
    """The float precisions ``profile``'s unit runs natively on ``backend``, fastest first; fp32 always last."""
    from edgeopt.converters.registry import get_backend

    name = BackendName(backend)
    offered = get_backend(name).precisions
    unit = _unit(profile, name)
    if unit is None:
        return [Precision.FP32]
    out: list[Precision] = []
    peak, cpu = unit.peak_gops, unit.kind == UnitKind.CPU
    if Precision.FP16 in offered and (peak.fp16 or 0) > (peak.fp32 or 0) and (
            not cpu or any(f in unit.isa for f in ARM_FP16_FLAGS)):
        out.append(Precision.FP16)
    if Precision.BF16 in offered and cpu and any(f in unit.isa for f in BF16_FLAGS) and (
            peak.bf16 is None or peak.bf16 > (peak.fp32 or 0)):
        out.append(Precision.BF16)
    return [*out, Precision.FP32]


def check_native(profile, backend: BackendName | str, precision: Precision) -> None:
    """``--precision bf16`` only where the profile's unit runs bf16 natively on ``backend`` (exit 2 otherwise):
    elsewhere the runtime would run fp32 (or emulate bf16) under a bf16 label."""
    from edgeopt.errors import UsageError

    if precision != Precision.BF16 or precision in native_float_precisions(profile, backend):
        return
    name = BackendName(backend)
    have = [p.value for p in native_float_precisions(profile, name)]
    unit = _unit(profile, name)
    where = f"{unit.kind.value} '{unit.name}'" if unit is not None else "no unit"
    raise UsageError(f"--precision bf16: profile '{profile.name}' runs {name.value} on {where}, which has no native "
                     f"bf16 there (bf16 needs a CPU with {' or '.join(BF16_FLAGS)} and a backend that runs it)",
                     f"use --precision {' or '.join(have)} (native float here), or int8")
