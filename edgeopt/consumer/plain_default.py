"""Where the runtime's plain default differs from the setting an artifact was judged at (OpenVINO's CPU runs bf16
by default on CPUs with AVX512-BF16 or AMX; edgeopt judges at the hint its settings name, f32 unless asked):
the line convert says about it, and the artifact judged again at that default."""

from __future__ import annotations

from .model import ConsumerCheck, PlainDefaultJudged

SETTING = "inference_precision"
BF16_ISA = ("avx512_bf16", "amx_bf16")


def differing_default(record: ConsumerCheck, manifest: dict) -> tuple[str, str] | None:
    """(the judged precision hint, the plain default this machine ran) for an OpenVINO artifact where they differ."""
    settings = manifest["runtime"].get("settings") or {}
    if manifest["runtime"].get("backend") != "openvino" or record.bare is None or \
            (settings.get("device") or "CPU") != "CPU":  # another device's plain default is that device's
        return None
    judged = settings.get(SETTING) or "f32"
    ran = record.bare.applied.get("INFERENCE_PRECISION_HINT")
    return (judged, ran) if ran and ran != judged else None


def target_runs_bf16(profile) -> bool:
    """Whether the profile's CPU lists bf16 instructions (its OpenVINO default is then bf16)."""
    from edgeopt.enums import UnitKind

    cpu = profile.unit(UnitKind.CPU) if profile is not None else None
    return bool(cpu and any(f in cpu.isa for f in BF16_ISA))


def unjudged_bf16_target(record: ConsumerCheck, manifest: dict, profile) -> bool:
    """An OpenVINO CPU artifact judged at another hint for a profile whose CPU runs bf16 by default, checked on a
    machine whose own default is not bf16 (so the bf16 run could not be judged here)."""
    settings = manifest["runtime"].get("settings") or {}
    return (manifest["runtime"].get("backend") == "openvino" and (settings.get("device") or "CPU") == "CPU"
            and (settings.get(SETTING) or "f32") != "bf16" and target_runs_bf16(profile) and record.bare is not None
            and record.bare.applied.get("INFERENCE_PRECISION_HINT") != "bf16")


def unjudged_line(profile_name: str) -> str:
    return (f"openvino: {profile_name}'s CPU runs OpenVINO at bf16 by default, which this machine does not: the "
            "artifact was not judged at bf16; load it with load.py or load.cc (they set the judged "
            f"{SETTING})")


def loud_line(judged: str, ran: str, model: str) -> str:
    return (f"openvino: a plain compile_model('{model}', 'CPU') runs this artifact at {ran} on this CPU, not at the "
            f"{judged} it was judged at: load it with load.py or load.cc (they set {SETTING}={judged})")


def judge_at_default(manifest: dict, ran: str, validate, bound: float | None) -> PlainDefaultJudged:
    """The artifact validated again (``validate``: manifest -> Validation) with the hint set to ``ran``."""
    runtime = dict(manifest["runtime"])
    runtime["settings"] = {**(runtime.get("settings") or {}), SETTING: ran}
    judged = (manifest["runtime"].get("settings") or {}).get(SETTING) or "f32"
    v = validate({**manifest, "runtime": runtime})
    gate = (v.gates or {}).get("max_accuracy_drop")
    return PlainDefaultJudged(setting=SETTING, judged=judged, plain_default=ran, metric=v.metric,
                              metric_value=v.metric_value, metric_drop=v.metric_drop, bound=bound,
                              holds_bound=gate.passed if gate is not None else None, samples=v.samples,
                              data_source=v.data_source)
