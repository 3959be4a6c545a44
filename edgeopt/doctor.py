"""``edgeopt doctor``: which runtimes and tools are installed (versions, whether they import), this CPU's
ISA and memory (from :mod:`edgeopt.host`)."""

from __future__ import annotations

import os

from edgeopt.host import cpu_facts

# Runtimes edgeopt can use: (import name, distribution, extra). Imports of the FAST ones are tried by
# default (well under a second together); the others only with ``full`` (tensorflow alone takes ~6 s).
# The chain's and every backend's libraries come from the registry; these are the others.
OTHER_RUNTIMES = (
    ("paramiko", "paramiko", "remote"),
    ("torch", "torch", None),
)


def runtime_libraries() -> list[tuple[str, str, str | None]]:
    from edgeopt.converters.registry import libraries

    return [lib for lib in libraries() if lib[0] != "numpy"] + list(OTHER_RUNTIMES)
OTHER_FAST_IMPORTS = frozenset({"paramiko"})  # with every backend's hooks' ``fast_imports``

# Command-line tools: name -> (apt package, what edgeopt uses it for, other places to look); a backend's own tools
# come from its hooks (``tools``)
OTHER_TOOLS = {
    "qemu-aarch64-static": ("qemu-user-static", "running aarch64 artifacts here under emulation", ()),
    "mmdebstrap": ("mmdebstrap", "building the aarch64 sysroot used for emulation", ()),
    "sshd": ("openssh-server", "the loopback SSH device used by remote tests", ("/usr/sbin/sshd",)),
    "arm-none-eabi-gcc": ("gcc-arm-none-eabi", "compiling a microcontroller profile's C array for its Cortex-M core", ()),
}


def _hooks() -> list:
    from edgeopt.converters.registry import backend_hooks

    return list(backend_hooks().values())


def fast_imports() -> frozenset[str]:
    """The import names ``doctor`` tries by default (each well under a second)."""
    return OTHER_FAST_IMPORTS.union(*(h.fast_imports for h in _hooks()))


def tools() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Every tool ``doctor`` looks for: the backends' own, then the others."""
    return {k: v for h in _hooks() for k, v in h.tools.items()} | OTHER_TOOLS


def _runtime_entry(mod: str, dist: str, extra: str | None, try_import: bool) -> dict:
    import importlib
    import importlib.util

    from edgeopt.deps import version_of

    ver = version_of(dist)
    entry: dict = {"name": dist, "module": mod, "version": ver, "installed": ver is not None, "extra": extra}
    if ver is None:
        entry["install"] = f"pip install 'edgeopt[{extra}]'" if extra else f"pip install {dist}"
        return entry
    if not try_import:
        entry["imports"] = None  # not tried (slow); `edgeopt doctor --full` tries it
        entry["found"] = importlib.util.find_spec(mod) is not None
        return entry
    try:
        module = importlib.import_module(mod)
        entry["imports"] = True
    except Exception as err:  # noqa: BLE001 - report, don't fail
        entry["imports"] = False
        entry["import_error"] = f"{type(err).__name__}: {str(err)[:160]}"
        return entry
    for hooks in _hooks():
        entry.update(hooks.library_facts(mod, module))
    return entry


def toolchain_facts() -> dict[str, dict]:
    """Which command-line tools are present, and the apt package that provides each."""
    import shutil

    out = {}
    for tool, (apt, purpose, extra_paths) in tools().items():
        path = shutil.which(tool) or next((p for p in extra_paths if os.access(p, os.X_OK)), None)
        out[tool] = {
            "found": path is not None,
            "path": path,
            "apt": apt,
            "install": f"sudo apt-get install -y {apt}",
            "purpose": purpose,
        }
    return out


def memory_facts() -> dict:
    try:
        import psutil

        vm = psutil.virtual_memory()
        return {"total_gb": round(vm.total / 1e9, 2), "available_gb": round(vm.available / 1e9, 2)}
    except Exception:  # noqa: BLE001 - best effort
        return {"total_gb": None, "available_gb": None}


def doctor_report(full: bool = False) -> dict:
    """Installed runtimes (versions; imports tried for the fast ones, all with ``full``), tools, CPU, memory."""
    import platform as _platform

    from edgeopt import __version__

    if full:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    fast = fast_imports()
    runtimes = [_runtime_entry(m, d, e, full or m in fast) for m, d, e in runtime_libraries()]
    warnings = [w for h in _hooks() for w in h.doctor_warnings(runtimes)]
    tools = toolchain_facts()
    warnings += [f"{t} not found ({v['purpose']}): {v['install']}" for t, v in tools.items() if not v["found"]]
    return {
        "edgeopt": __version__,
        "python": _platform.python_version(),
        "platform": _platform.platform(),
        "cpu": cpu_facts(),
        "memory": memory_facts(),
        "runtimes": runtimes,
        "tools": tools,
        "imports_checked": "all" if full else sorted(fast),
        "warnings": warnings,
    }

