"""A device benchmark's result with where and how it ran: the device, its identity, the upload, energy and cost
from the board's profile (none for an emulated one), and the warnings."""

from __future__ import annotations

from edgeopt.errors import EdgeoptError
from edgeopt.identity import device_identity
from edgeopt.runtime.environment import interference_warning

from .device_run import Ran, location_of
from .inventory import Device
from .staging import Staged


def described(dev: Device, ran: Ran, staged: Staged, *, run_dir: str | None, labgrid, wall_s: float,
               inputs) -> dict:
    """The runner's result with where and how it ran: the device, its identity, energy, warnings."""
    location = location_of(dev)
    result = ran.result
    result.pop("ok", None)
    result.update({
        "device": dev.name,
        "device_profile": dev.profile,
        "location": location.value,
        "emulated": dev.emulated,
        "timings_label": "emulated (qemu/loopback: not the board's speed)" if dev.emulated else "measured on device",
        "artifact": str(staged.artifact.resolve()) if staged.converted is None else None,  # a temporary one is gone
        "artifact_on_device": result.get("artifact"),
        "converted": staged.converted,
        "device_facts": ran.facts,
        "cores": {**ran.cores, "used": (result.get("environment") or {}).get("cores_used")},
        "upload": ran.stats.to_dict(),
        "run_dir": run_dir,
        "cleaned_stale_runs": ran.cleaned,
        "wall_seconds": round(wall_s, 3),
        "labgrid": labgrid,
    })
    result.setdefault("environment", {})["location"] = location.value
    result["identity"] = device_identity(dev.name, dev.profile, emulated=dev.emulated, env=result["environment"],
                                         facts=ran.facts, built_for=result.get("profile"))
    result["energy_figures"] = _energy(dev, result)
    warnings = result.setdefault("warnings", [])
    warnings.extend(w for w in ran.runner_said if w not in warnings)
    if (busy := interference_warning(result["environment"])):
        warnings.append(busy)
    if result.get("memory"):  # the runner's peak by phase, beside the artifact's predicted peak
        from edgeopt.memory.bench_row import beside_prediction, predicted_of

        try:
            predicted = predicted_of(staged.artifact)
        except OSError:  # a converted artifact's temporary folder already gone
            predicted = (staged.manifest.get("memory") or {}).get("predicted")
        result["memory"] = beside_prediction(result["memory"], predicted)
    if inputs:
        from edgeopt.bench.api import note_inputs_used

        note_inputs_used(result, staged.manifest["inputs"], str(inputs))
    return result


def _energy(dev: Device, result: dict) -> dict:
    """Energy and cost from the profile of the machine that ran it: the board's; none for an emulated one."""
    from edgeopt.bench.energy import energy_figures

    if dev.emulated:
        return {"source": "unavailable", "joules_per_inference": None, "cost_per_1k_queries": None,
                "note": "emulated device: qemu on this host, no energy figure for the board"}
    try:
        from edgeopt.profiles import load_profile

        tdp = load_profile(dev.profile).tdp_w
    except EdgeoptError:
        tdp = None
    return energy_figures(result, tdp_w=tdp)
