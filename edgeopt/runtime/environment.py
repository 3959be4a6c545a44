"""What a measurement ran on: libraries, CPU, load, clocks, temperature, and power meters.

Shipped to devices (standard library + numpy only, no edgeopt imports). Everything is read
where it is readable and left ``None`` where it is not; nothing here needs root.

Power: Intel RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``, a cumulative counter) and
the Jetson INA3221 rails (``in_power*_input`` in mW on the i2c driver, or an ``ina3221`` hwmon
device with ``power*_input`` in uW or ``in*_input`` mV x ``curr*_input`` mA), sampled in a
background thread. ``open_power_meter()`` returns ``None`` where neither exists: energy is then
*estimated* by the caller and labelled so.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import platform
import socket
import threading
import time

# reported wherever a measurement runs; a caller adds the runtimes it may use (on the host, every backend's from the
# registry; on a device, the distributions the artifact's manifest recorded at build)
LIBRARIES = ("numpy", "onnx")
ISA_OF_INTEREST = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
    "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd", "asimddp", "asimdhp", "fphp", "sve", "sve2", "i8mm", "bf16",
)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_number(path: str) -> float | None:
    text = _read(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    out = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def recorded_libraries(artifact_dir: str) -> tuple[str, ...]:
    """The distributions an artifact's manifest recorded at build (its runtime's among them): what a measurement
    of it on a device reports; none when the manifest can't be read (opening the artifact then says why)."""
    import json

    try:
        with open(os.path.join(artifact_dir, "manifest.json")) as f:
            versions = json.load(f).get("versions")
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(d for d in versions if d != "edgeopt") if isinstance(versions, dict) else ()


def cores_used() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def cpu_info(root: str = "/") -> dict:
    info: dict[str, str] = {}
    text = _read(os.path.join(root, "proc/cpuinfo")) or ""
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info.setdefault(k.strip(), v.strip())
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return {
        "model": info.get("model name") or info.get("Model") or platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "isa": sorted(f for f in ISA_OF_INTEREST if f in flags),
        "logical_cpus": os.cpu_count(),
    }


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


def cpu_clocks(cores: list[int], root: str = "/") -> dict:
    base = os.path.join(root, "sys/devices/system/cpu")
    mhz = {}
    for c in cores:
        v = _read_number(f"{base}/cpu{c}/cpufreq/scaling_cur_freq")
        if v is not None:
            mhz[str(c)] = round(v / 1000, 1)
    return {
        "mhz": mhz or None,
        "governor": _read(f"{base}/cpu{cores[0] if cores else 0}/cpufreq/scaling_governor"),
    }


def temperature_c(root: str = "/") -> float | None:
    temps = []
    for zone in sorted(glob.glob(os.path.join(root, "sys/class/thermal/thermal_zone*/temp"))):
        v = _read_number(zone)
        if v is not None and v > 0:
            temps.append(v / 1000)
    return round(max(temps), 1) if temps else None


def cpu_counters(root: str = "/") -> dict | None:
    """All cores' CPU time from ``/proc/stat`` (seconds: busy, steal, total) and this process's own
    (its finished children included: work it started is not interference)."""
    text = _read(os.path.join(root, "proc/stat"))
    if not text or not text.startswith("cpu "):
        return None
    try:
        f = [int(x) for x in text.split("\n", 1)[0].split()[1:9]]
        hz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):  # pragma: no cover
        return None
    f += [0] * (8 - len(f))
    user, nice, system, idle, iowait, irq, softirq, steal = f
    own = os.times()
    return {"busy_s": (user + nice + system + irq + softirq) / hz, "steal_s": steal / hz, "total_s": sum(f) / hz,
            "own_s": own.user + own.system + own.children_user + own.children_system}


def interference(before: dict | None, after_: dict | None) -> dict | None:
    """What else the CPUs did between two :func:`cpu_counters`, as % of all cores' time.

    ``other_busy_pct``: CPU time spent by other processes (busy time minus this process's own);
    ``steal_pct``: time the hypervisor gave to other guests. Either one well above a few percent
    means the latencies were measured on a shared machine and will be noisier than on an idle one.
    """
    if not before or not after_:
        return None
    total = after_["total_s"] - before["total_s"]
    if total <= 0:
        return None
    other = (after_["busy_s"] - before["busy_s"]) - (after_["own_s"] - before["own_s"])
    return {"other_busy_pct": round(max(0.0, 100 * other / total), 1),
            "steal_pct": round(max(0.0, 100 * (after_["steal_s"] - before["steal_s"]) / total), 1),
            "window_s": round(total / max(1, os.cpu_count() or 1), 1)}


NOISY_PCT = 10.0


def interference_warning(env: dict) -> str | None:
    """One line when other processes or other guests took a noticeable share of the CPUs."""
    i = (env or {}).get("interference") or {}
    other, steal = i.get("other_busy_pct") or 0.0, i.get("steal_pct") or 0.0
    if other + steal < NOISY_PCT:
        return None
    return (f"machine not idle: other processes used {other:.0f} % and other guests (steal) {steal:.0f} % of the "
            f"CPUs during the measurement; expect noisier latencies than on an idle device")


def collect(location: str = "local", *, libraries: tuple[str, ...] = (), root: str = "/") -> dict:
    """A snapshot of the machine, taken just before a measurement (see :func:`after`); ``libraries``: the
    distributions to report besides :data:`LIBRARIES` (those not installed are left out)."""
    import sys

    cores = cores_used()
    return {
        "location": location,
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_info(root),
        "cores_used": cores,
        "libraries": library_versions((*LIBRARIES, *libraries)),
        "load_before": load_average(),
        "clocks_before": cpu_clocks(cores, root),
        "temperature_c_before": temperature_c(root),
        "executable": os.path.basename(sys.executable),
        "_cpu_counters_before": cpu_counters(root),
    }


def after(env: dict, root: str = "/") -> dict:
    """Adds the load, clocks, temperature and CPU interference read just after the measurement."""
    env["interference"] = interference(env.pop("_cpu_counters_before", None), cpu_counters(root))
    env["load_after"] = load_average()
    env["clocks_after"] = cpu_clocks(env.get("cores_used") or [0], root)
    env["temperature_c_after"] = temperature_c(root)
    return env


# --------------------------------------------------------------------------- power


class RaplMeter:
    """Intel RAPL package energy counters (cumulative uJ; wrap-around handled)."""

    kind = "rapl"

    def __init__(self, domains: list[str]):
        self.domains = domains
        self._start: list[float] = []
        self._t0 = 0.0

    def _read(self) -> list[float]:
        return [_read_number(os.path.join(d, "energy_uj")) or 0.0 for d in self.domains]

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._start = self._read()

    def stop(self) -> dict:
        end = self._read()
        seconds = time.perf_counter() - self._t0
        joules = 0.0
        for d, a, b in zip(self.domains, self._start, end, strict=True):
            delta = b - a
            if delta < 0:
                delta += _read_number(os.path.join(d, "max_energy_range_uj")) or 0.0
            joules += delta / 1e6
        return {
            "source": "measured",
            "meter": self.kind,
            "joules": joules,
            "seconds": seconds,
            "avg_power_w": joules / seconds if seconds > 0 else None,
            "rails": [os.path.basename(d) for d in self.domains],
            "note": "CPU package energy (RAPL): includes everything else running on the package",
        }


class SampledPowerMeter:
    """Power rails read as instantaneous watts in a background thread; energy = mean power x time."""

    kind = "ina3221"

    def __init__(self, rails: dict[str, callable], interval_s: float = 0.05):
        self.rails = rails
        self.interval_s = interval_s
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def read_watts(self) -> float:
        return sum(f() or 0.0 for f in self.rails.values())

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._samples.append(self.read_watts())
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._samples = []
        self._stop.clear()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        seconds = time.perf_counter() - self._t0
        if not self._samples:
            self._samples.append(self.read_watts())
        watts = sum(self._samples) / len(self._samples)
        return {
            "source": "measured",
            "meter": self.kind,
            "joules": watts * seconds,
            "seconds": seconds,
            "avg_power_w": watts,
            "power_samples": len(self._samples),
            "rails": sorted(self.rails),
            "note": "board input rail(s) sampled every %.0f ms" % (self.interval_s * 1e3),
        }


def _ina3221_rails(root: str) -> dict[str, callable]:
    rails: dict[str, callable] = {}
    # JetPack 4 style: iio device with in_power<N>_input in mW, rail_name_<N>
    pattern = os.path.join(root, "sys/bus/i2c/drivers/ina3221*/**/in_power*_input")
    for path in sorted(glob.glob(pattern, recursive=True)):
        ch = path.rsplit("in_power", 1)[1].split("_")[0]
        name = _read(os.path.join(os.path.dirname(path), f"rail_name_{ch}")) or f"{os.path.dirname(path)}:{ch}"
        rails[name] = (lambda p=path: (_read_number(p) or 0.0) / 1e3)
    if rails:
        return _prefer_input_rail(rails)
    # hwmon style (JetPack 5+): name == ina3221, in<N>_input mV x curr<N>_input mA, or power<N>_input uW
    for hw in sorted(glob.glob(os.path.join(root, "sys/class/hwmon/hwmon*"))):
        if not (_read(os.path.join(hw, "name")) or "").startswith("ina3221"):
            continue
        for path in sorted(glob.glob(os.path.join(hw, "power*_input"))):
            rails[path] = (lambda p=path: (_read_number(p) or 0.0) / 1e6)
        for path in sorted(glob.glob(os.path.join(hw, "curr*_input"))):
            ch = os.path.basename(path)[4:].split("_")[0]
            volt = os.path.join(hw, f"in{ch}_input")
            if os.path.exists(volt):
                label = _read(os.path.join(hw, f"in{ch}_label")) or f"{os.path.basename(hw)}:{ch}"
                rails[label] = (
                    lambda v=volt, c=path: (_read_number(v) or 0.0) * (_read_number(c) or 0.0) / 1e6
                )
    return _prefer_input_rail(rails)


def _prefer_input_rail(rails: dict[str, callable]) -> dict[str, callable]:
    """On Jetsons the first rail (VDD_IN / POM_5V_IN) is the whole board: the others are parts of it."""
    for name in rails:
        if name.upper() in ("VDD_IN", "POM_5V_IN", "VIN_SYS_5V0"):
            return {name: rails[name]}
    return rails


def open_power_meter(root: str = "/"):
    """A RAPL or INA3221 meter if this machine exposes one (and it is readable), else None."""
    domains = [
        d for d in sorted(glob.glob(os.path.join(root, "sys/class/powercap/intel-rapl:*")))
        if os.path.basename(d).count(":") == 1 and _read_number(os.path.join(d, "energy_uj")) is not None
    ]
    if domains:
        return RaplMeter(domains)
    rails = _ina3221_rails(root)
    if rails:
        return SampledPowerMeter(rails)
    return None
