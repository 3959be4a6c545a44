"""Reaching a device (``open_transport``) and asking it what it is (``check_device``).

The probe is a small self-contained Python script run with the device's own python: it
reports architecture, OS, Python version, which runtimes import (and their versions), free
disk and memory, the CPU governor and temperature. It prints one JSON object.
"""

from __future__ import annotations

import json
import shlex
import time

from edgeopt.errors import RemoteError

from .inventory import Device, TransportKind
from .transport import Transport


def device_runtimes() -> dict[str, str]:
    """import name -> distribution of what the device may run: every backend's device runtime, and numpy."""
    from edgeopt.converters.registry import backend_classes

    out = {cls.device_runtime[0]: cls.device_runtime[1] for cls in backend_classes().values() if cls.device_runtime}
    return {**out, "numpy": "numpy"}


PROBE_SCRIPT = r'''
import json, os, platform, shutil, sys, importlib
def read(p):
    try:
        with open(p) as f: return f.read().strip()
    except OSError: return None
out = {"arch": platform.machine(), "os": platform.platform(), "python": platform.python_version(),
       "python_executable": sys.executable, "cpus": os.cpu_count()}
rel = read("/etc/os-release") or ""
for line in rel.splitlines():
    if line.startswith("PRETTY_NAME="): out["distro"] = line.split("=", 1)[1].strip('"')
mods = json.loads(sys.argv[2])
rt = {}
for mod, dist in mods.items():
    try:
        m = importlib.import_module(mod)
        v = getattr(m, "__version__", None)
        if v is None:
            try:
                from importlib.metadata import version
                v = version(dist)
            except Exception: v = None
        rt[mod] = {"imports": True, "version": v}
    except BaseException as e:
        rt[mod] = {"imports": False, "error": (type(e).__name__ + ": " + str(e))[:160]}
out["runtimes"] = rt
work = sys.argv[1] if len(sys.argv) > 1 else "."
try:
    du = shutil.disk_usage(work)
    out["disk_free_gb"] = round(du.free / 1e9, 2)
except OSError: out["disk_free_gb"] = None
mem = {}
for line in (read("/proc/meminfo") or "").splitlines():
    k, _, v = line.partition(":")
    if k in ("MemTotal", "MemAvailable"): mem[k] = round(int(v.split()[0]) / 1e6, 2)
out["memory_total_gb"] = mem.get("MemTotal"); out["memory_available_gb"] = mem.get("MemAvailable")
out["governor"] = read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
t = read("/sys/class/thermal/thermal_zone0/temp")
out["temperature_c"] = int(t) / 1000 if t and t.lstrip("-").isdigit() else None
print(json.dumps(out))
'''

# Cheap facts recorded beside every remote benchmark (shell only, no python start-up).
FACTS_SCRIPT = r'''printf 'kernel\t%s\n' "$(uname -sr)"; printf 'arch\t%s\n' "$(uname -m)"
printf 'hostname\t%s\n' "$(uname -n)"; printf 'loadavg\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
printf 'governor\t%s\n' "$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null)"
printf 'temp_millic\t%s\n' "$(cat /sys/class/thermal/thermal_zone0/temp 2>/dev/null)"
printf 'cpus_allowed\t%s\n' "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status 2>/dev/null)"
printf 'taskset\t%s\n' "$(command -v taskset 2>/dev/null)"
if [ -x "$1/venv/bin/python" ]; then printf 'venv\t%s\n' "$1/venv/bin/python"; fi'''


def open_transport(device: Device, *, accept_new_host_key: bool = False, notify=None,
                   connect_timeout: float = 10.0, wait: float | None = None, cancel=None) -> Transport:
    """The device's transport, by its kind: SSH to a fixed host, or a labgrid place (acquired here,
    waiting at most ``wait`` seconds, and released when the transport closes)."""
    if device.transport == TransportKind.LABGRID:
        from .labgrid import open_labgrid_transport

        return open_labgrid_transport(device, accept_new_host_key=accept_new_host_key, notify=notify,
                                      connect_timeout=connect_timeout, wait=wait, cancel=cancel)
    from edgeopt.remote.ssh import SshTransport

    return SshTransport.for_device(device, accept_new_host_key=accept_new_host_key, connect_timeout=connect_timeout,
                                   notify=notify)


def python_argv(device: Device) -> list[str]:
    return shlex.split(device.python)


def quick_facts(transport: Transport) -> dict:
    res = transport.run(["sh", "-c", FACTS_SCRIPT, "edgeopt-facts", transport.work_dir], timeout=30)
    facts: dict = {}
    for line in res.stdout.splitlines():
        k, _, v = line.partition("\t")
        facts[k] = v or None
    t = facts.pop("temp_millic", None)
    facts["temperature_c"] = int(t) / 1000 if t and t.lstrip("-").isdigit() else None
    return facts


def run_probe(transport: Transport, device: Device, timeout: float = 600) -> dict:
    res = transport.run([*python_argv(device), "-c", PROBE_SCRIPT, transport.work_dir, json.dumps(device_runtimes())],
                        timeout=timeout)
    if res.rc != 0:
        raise RemoteError(
            f"{device.name}: the probe failed with exit {res.rc} running '{device.python}'",
            (res.stderr.strip().splitlines() or ["is python3 installed on the device?"])[-1][:200],
        )
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as err:
        raise RemoteError(f"{device.name}: the probe printed no JSON", res.stdout[-200:]) from err


def check_device(device: Device, *, accept_new_host_key: bool = False, notify=None) -> dict:
    """Reachability and facts of ``device``; an unreachable device is reported, not raised."""
    t0 = time.monotonic()
    out: dict = {"device": device.name, "host": device.host, "profile": device.profile, "emulated": device.emulated}
    try:
        transport = open_transport(device, accept_new_host_key=accept_new_host_key, notify=notify)
    except RemoteError as err:
        return {**out, "reachable": False, "error": err.message, "hint": err.hint}
    try:
        out["reachable"] = True
        out["connect_seconds"] = round(time.monotonic() - t0, 3)
        out["work_dir"] = transport.work_dir
        out.update(run_probe(transport, device))
        if device.emulated:  # the probe ran the emulated python; the shell is the emulating host's
            host = quick_facts(transport)
            out["emulates"] = {"profile": device.profile, "arch": out.get("arch"), "python": device.python}
            out["emulated_on"] = {k: host.get(k) for k in ("hostname", "arch", "kernel")}
    finally:
        transport.close()
    return out
