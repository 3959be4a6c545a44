"""Where a number was measured, kept apart from what the artifact was built for.

Every stored run carries ``identity``::

    {"machine": "build-7" | "pi5-lab",      # host name (local runs) or the device's name
     "cpu": "Intel(R) Xeon(R) ...",         # the CPU the runner detected
     "arch": "x86_64",
     "location": "local" | "remote" | "emulated",
     "emulated_on": "build-7" | None,       # the host that ran the emulation
     "profile": "host" | "pi5",             # the profile of the machine that ran it (energy, roofline)
     "built_for": "pi5" | None}             # the artifact's target profile

A local run of a pi5 artifact on an x86 host is "machine build-7, local, built for pi5": its
energy estimate and roofline use the host's profile, never the Pi's. Comparisons are like for
like: same location kind and same machine (name and CPU), or they say so.
"""

from __future__ import annotations

from edgeopt.enums import RunLocation

#: the fields that make two runs comparable (besides the artifact itself)
SAME_DEVICE_FIELDS = ("location", "machine", "cpu")


def _profile_name(prof) -> str | None:
    if isinstance(prof, dict):
        return prof.get("name")
    return prof or None


def local_identity(env: dict, built_for: str | None) -> dict:
    """A run measured in this process on this machine (``edgeopt bench``)."""
    cpu = env.get("cpu") or {}
    return {"machine": env.get("hostname") or "localhost", "cpu": cpu.get("model"), "arch": cpu.get("arch"),
            "location": RunLocation.LOCAL.value, "emulated_on": None, "profile": "host",
            "built_for": _profile_name(built_for)}


def device_identity(device_name: str, device_profile: str, *, emulated: bool, env: dict, facts: dict,
                    built_for: str | None) -> dict:
    """A run on an inventory device; an emulated one also names the host that emulated it."""
    cpu = env.get("cpu") or {}
    return {"machine": device_name, "cpu": cpu.get("model"), "arch": cpu.get("arch"),
            "location": (RunLocation.EMULATED if emulated else RunLocation.REMOTE).value,
            "emulated_on": (facts or {}).get("hostname") if emulated else None, "profile": device_profile,
            "built_for": _profile_name(built_for)}


def identity_of(result: dict) -> dict:
    """The stored identity, or one rebuilt from an older result (before identities were stored)."""
    if isinstance(result.get("identity"), dict):
        return result["identity"]
    env = result.get("environment") or {}
    cpu = env.get("cpu") or {}
    location = env.get("location") or result.get("location") or RunLocation.LOCAL.value
    built_for = _profile_name(result.get("profile"))
    if location == RunLocation.LOCAL.value:
        return {"machine": env.get("hostname") or _profile_name(result.get("device")), "cpu": cpu.get("model"),
                "arch": cpu.get("arch"), "location": location, "emulated_on": None, "profile": "host",
                "built_for": built_for}
    return {"machine": _profile_name(result.get("device")), "cpu": cpu.get("model"), "arch": cpu.get("arch"),
            "location": location,
            "emulated_on": (result.get("device_facts") or {}).get("hostname")
            if location == RunLocation.EMULATED.value else None,
            "profile": result.get("device_profile") or built_for, "built_for": built_for}


def describe(ident: dict) -> str:
    """One line: ``build-7 (Intel Xeon, x86_64), local; artifact built for pi5``."""
    cpu = ident.get("cpu") or "CPU unknown"
    arch = f", {ident['arch']}" if ident.get("arch") and ident["arch"] != cpu else ""
    where = f"{ident.get('machine')} ({cpu}{arch})"
    how = ident.get("location") or "?"
    if how == RunLocation.EMULATED.value:
        how = f"emulated on {ident.get('emulated_on') or 'this host'}"
    built = f"; artifact built for {ident['built_for']}" if ident.get("built_for") else ""
    return f"{where}, {how}{built}"


def short_label(ident: dict) -> str:
    """For plot labels: ``build-7 local`` / ``pi5-emu emulated``."""
    return f"{ident.get('machine')} {ident.get('location')}"


def differences(a: dict, b: dict) -> list[str]:
    """What makes two identities different devices (empty: like for like)."""
    out = []
    for field in SAME_DEVICE_FIELDS:
        if a.get(field) != b.get(field):
            out.append(f"{field} {a.get(field)!r} vs {b.get(field)!r}")
    return out


def setting_warnings(a: dict, b: dict) -> list[str]:
    """Settings that make two results of one device less comparable: threads, library versions."""
    out = []
    if a.get("threads") != b.get("threads"):
        out.append(f"different thread counts: {a.get('threads')} vs {b.get('threads')}")
    la = (a.get("environment") or {}).get("libraries") or {}
    lb = (b.get("environment") or {}).get("libraries") or {}
    for lib in sorted(set(la) & set(lb)):
        if la[lib] != lb[lib]:
            out.append(f"different {lib} versions: {la[lib]} vs {lb[lib]}")
    if a.get("backend") != b.get("backend"):
        out.append(f"different backends: {a.get('backend')} vs {b.get('backend')}")
    return out
