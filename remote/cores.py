"""How many cores a benchmark on a device may use, and pinning an emulated device to its profile's count.

An emulated device runs on this machine, which may have more cores than the board it plays: its
runner is started under ``taskset -c`` with the first N of the cores the device's shell may use
(N = the profile's CPU core count) and, unless ``--threads`` says otherwise, with N runtime
threads. Where that is not possible (fewer cores here than the profile has, no ``taskset``) the
run is not limited and the record says why. Real boards are never pinned: all their cores are
the board's. The record goes into the result as ``cores``.
"""

from __future__ import annotations

from edgeopt.enums import UnitKind
from edgeopt.errors import EdgeoptError

from .inventory import Device


def parse_cpu_list(text: str | None) -> list[int]:
    """``"0-3,6"`` (Linux ``Cpus_allowed_list``) -> ``[0, 1, 2, 3, 6]``; unreadable -> ``[]``."""
    out: list[int] = []
    for part in (text or "").strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        out += range(int(lo), int(hi or lo) + 1)
    return sorted(set(out))


def profile_cores(profile: str) -> int | None:
    """The CPU core count of ``profile`` (a name or YAML path); None when it has no CPU or won't load."""
    from edgeopt.profiles import load_profile

    try:
        unit = load_profile(profile).unit(UnitKind.CPU)
    except EdgeoptError:
        return None
    return unit.cores if unit is not None else None


def core_plan(device: Device, facts: dict, threads: int | None) -> dict:
    """What the run may use: ``profile_cores``, ``device_cores`` (the cores the device's shell may
    use), ``pinned`` (CPU ids given to ``taskset -c``, or None), ``threads`` (runtime threads asked
    for; None: the artifact's setting) and ``note``."""
    allowed = parse_cpu_list(facts.get("cpus_allowed"))
    # 'host' describes the machine running edgeopt: that is the device only when it is emulated here
    want = profile_cores(device.profile) if device.emulated or device.profile != "host" else None
    plan = {"profile_cores": want, "device_cores": len(allowed) or None, "pinned": None, "threads": threads,
            "note": None}
    if not device.emulated:
        plan["note"] = "a real board: its own cores, not pinned"
    elif want is None:
        plan["note"] = f"profile '{device.profile}' names no CPU core count: not pinned"
    elif not allowed:
        plan["note"] = "the emulating host did not say which cores it may use: not pinned"
    elif len(allowed) <= want:
        plan["note"] = (f"the emulating host has {len(allowed)} core(s), not more than the profile's {want}: "
                        "all of them are used")
    elif not facts.get("taskset"):
        plan["note"] = "taskset (util-linux) is not on the emulating host: not pinned"
    else:
        plan["pinned"] = allowed[:want]
        plan["threads"] = threads or want
        plan["note"] = f"pinned to the profile's {want} core(s) with taskset"
    return plan


def pin_argv(argv: list[str], plan: dict) -> list[str]:
    """``argv`` under ``taskset -c`` when the plan pins cores (taskset execs: the PID stays the runner's)."""
    if not plan.get("pinned"):
        return argv
    return ["taskset", "-c", ",".join(str(c) for c in plan["pinned"]), *argv]
