"""Facts about the machine edgeopt runs on (CPU, memory bandwidth, temperature, processes), and the data of
the ``host`` profile built from them (``edgeopt.profiles`` parses it; ``edgeopt.doctor`` reports the rest).

Peak throughput of the host is *derived* from the ISA and clock (FLOP/cycle per
vector unit, two FMA pipes assumed for AVX-512/AVX2) and memory bandwidth is
*measured* with a large numpy copy; the profile's ``sources`` say so.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from pathlib import Path

from edgeopt.files import write_text_atomic

ISA_OF_INTEREST = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
    "neon", "asimd", "asimddp", "fphp", "asimdhp", "asimdfhm", "bf16", "i8mm", "sve", "sve2",
)

# What the ISA flags mean for inference (``features`` in cpu_facts and doctor).
FEATURES = {
    "avx512": ("avx512f",),
    "vnni": ("avx512_vnni", "avx_vnni"),  # x86 INT8 dot products
    "amx": ("amx_int8", "amx_bf16"),  # x86 tile matrix multiply
    "bf16": ("avx512_bf16", "amx_bf16", "bf16"),
    "dotprod": ("asimddp",),  # Arm SDOT/UDOT
    "fp16_arith": ("asimdhp", "avx512_fp16"),
    "i8mm": ("i8mm",),
}


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return info


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def cpu_facts() -> dict:
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    model = info.get("model name") or info.get("Model") or platform.processor() or platform.machine()
    mhz = None
    for p in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",):
        try:
            mhz = int(Path(p).read_text()) / 1000
        except (OSError, ValueError):
            pass
    if mhz is None and info.get("cpu MHz"):
        mhz = float(info["cpu MHz"])
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    isa = sorted(f for f in ISA_OF_INTEREST if f in flags)
    return {
        "model": model,
        "vendor": info.get("vendor_id") or info.get("CPU implementer"),
        "arch": platform.machine(),
        "cores": cpu_cores(),
        "logical_cpus": os.cpu_count(),
        "mhz": mhz,
        "governor": governor,
        "isa": isa,
        "features": {name: any(f in isa for f in names) for name, names in FEATURES.items()},
        "memory_gb": _mem_total_gb(),
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _mem_total_gb() -> float | None:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 1e9, 2)
    except Exception:  # noqa: BLE001 - best effort
        return None


def cpu_temperature_c() -> float | None:
    for zone in sorted(Path("/sys/class/thermal").glob("thermal_zone*/temp")):
        try:
            return int(zone.read_text()) / 1000
        except (OSError, ValueError):
            continue
    return None


def _cache_file() -> Path:
    from edgeopt.paths import CacheArea, cache_subdir

    return cache_subdir(CacheArea.HOST) / "host-bandwidth.json"


def _copy_bandwidth_gbps(size_mb: int, repeats: int) -> float:
    import numpy as np

    a = np.ones(size_mb * 1024 * 1024 // 8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return round(2 * a.nbytes / best / 1e9, 1)


@functools.lru_cache(maxsize=1)
def measure_memory_bandwidth_gbps(size_mb: int = 128, repeats: int = 5) -> float:
    """Best-of-N numpy copy bandwidth (read + write bytes / time), a STREAM-like 'copy'.

    Measured once per machine (CPU model and core count) and kept in the user cache, so the
    ``host`` profile, and every estimate made from it, does not move with the machine's load
    from one command to the next. ``EDGEOPT_REMEASURE_HOST=1`` measures again; a fresh
    measurement only replaces the cached one when it is higher (the best seen is the quietest).
    """
    import json

    key = f"{cpu_facts()['model']}|{cpu_facts()['cores']}"
    path = _cache_file()
    cached = None
    try:
        cached = json.loads(path.read_text()).get(key)
    except (OSError, ValueError):
        pass
    if cached and os.environ.get("EDGEOPT_REMEASURE_HOST") != "1":
        return float(cached)
    bw = _copy_bandwidth_gbps(size_mb, repeats)
    if cached:
        bw = max(bw, float(cached))
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
        data[key] = bw
        write_text_atomic(path, json.dumps(data))
    except (OSError, ValueError):
        pass
    return bw


def _flops_per_cycle(isa: set[str], arch: str, vendor: str | None = None) -> dict[str, float]:
    """FP32 FLOP/cycle/core and INT8 op/cycle/core from the widest vector ISA."""
    if "avx512f" in isa:
        # Intel server cores: two 512-bit FMA pipes; AMD Zen 4 runs AVX-512 on 256-bit pipes.
        lanes = 8 if vendor == "AuthenticAMD" else 16
        fp32 = 2 * lanes * 2
        int8 = fp32 * 4 if "avx512_vnni" in isa else fp32 * 2
        if "amx_int8" in isa:
            int8 = 2048
    elif "avx2" in isa:
        fp32 = 2 * 8 * 2
        int8 = fp32 * 4 if "avx_vnni" in isa else fp32 * 2
    elif arch in ("aarch64", "arm64"):
        fp32 = 2 * 4 * 2
        int8 = fp32 * 4 if "asimddp" in isa else fp32 * 2
    else:
        fp32 = 4 * 2
        int8 = fp32 * 2
    return {"fp32": fp32, "int8": int8}


def _host_backends(arch: str, cores: int) -> list[dict]:
    """Each backend's entry for this machine (its hooks' ``host_runtime``), ordered by the hooks' ``host_rank``:
    the profile's first backend is the one plans and analyze use by default."""
    from edgeopt.converters.registry import backend_hooks

    ranked = sorted(backend_hooks().values(), key=lambda h: h.host_rank)
    return [e for h in ranked if (e := h.host_runtime(arch, cores)) is not None]


def host_profile_data() -> dict:
    """The ``host`` profile's data, read from this machine (numbers labelled derived/measured);
    ``edgeopt.profiles`` parses it like any profile YAML."""
    f = cpu_facts()
    isa = set(f["isa"])
    ghz = round((f["mhz"] or 2000.0) / 1000, 3)
    per_cycle = _flops_per_cycle(isa, f["arch"], f.get("vendor"))
    cores = f["cores"]
    peak = {k: round(v * cores * ghz, 1) for k, v in per_cycle.items()}
    if "avx512_bf16" in isa or "amx_bf16" in isa:
        peak["bf16"] = peak["fp32"] * 2
    arch = "aarch64" if f["arch"] in ("aarch64", "arm64") else f["arch"]
    bw = measure_memory_bandwidth_gbps()
    backends = _host_backends(arch, cores)
    data = {
        "name": "host",
        "description": f"this machine: {f['model']}, {cores} cores (detected at run time)",
        "arch": arch,
        "detected": True,
        "compute_units": [
            {
                "kind": "cpu",
                "name": f["model"],
                "cores": cores,
                "clock_ghz": ghz,
                "isa": f["isa"],
                "peak_gops": peak,
            }
        ],
        "memory": {"size_gb": f["memory_gb"] or 1.0, "bandwidth_gbps": bw, "type": "measured"},
        "tdp_w": 15.0 * cores,
        "backends": backends,
        "default_chain": {"precision": "int8", "prune": 0.0},
        "remote": {"python": "python3", "arch": arch},
        "sources": {
            "compute_units.cpu.peak_gops": {
                "kind": "estimate",
                "ref": "/proc/cpuinfo flags and clock",
                "note": f"derived from cpuinfo: cores x GHz x {per_cycle} op/cycle/core (2 FMA pipes of the widest "
                "vector ISA assumed; 256-bit pipes on AMD); the clock is the current or maximum one",
            },
            "memory.bandwidth_gbps": {
                "kind": "measured",
                "ref": "numpy copy of 128 MiB, best of 5, measured once and cached (EDGEOPT_REMEASURE_HOST=1 to redo)",
                "note": "single-thread copy bandwidth; the chip's peak is higher",
            },
            "tdp_w": {"kind": "estimate", "ref": "none", "note": "15 W a core, a placeholder for energy estimates"},
            "memory.size_gb": {"kind": "measured", "ref": "/proc/meminfo MemTotal (os.sysconf on other systems)",
                               "note": "this machine's RAM, read at run time; 1.0 where it could not be read"},
        },
    }
    return data


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` of this machine still runs (a zombie does not)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True
