"""An aarch64 Debian sysroot with Python 3.11 and aarch64 wheels, run under qemu-user.

Built once and cached under the user cache dir (``$EDGEOPT_CACHE_DIR/emulate``):

- ``sysroot-bookworm-arm64``: ``mmdebstrap --variant=extract`` of python3 and the C/C++ runtime
  libraries, with a fake Cortex-A76 ``/proc/cpuinfo`` (onnxruntime segfaults at import under
  qemu when it parses the x86 host's);
- ``wheels-cp311-aarch64``: ``pip download`` of numpy, ai-edge-litert, onnxruntime, openvino (its ARM CPU
  plugin, the ARM profiles' third backend) and apache-tvm (at the host's version, kept to its runtime library)
  for manylinux aarch64 (from PyPI, the only network this needs);
- ``site-cp311-aarch64``: those wheels installed with ``pip install --target``. Its completion marker lists them;
  a site built before a wheel was added gets the missing ones installed beside the others, in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from edgeopt.errors import MissingDependencyError, RemoteError
from edgeopt.paths import CacheArea, cache_subdir

SUITE = "bookworm"
PACKAGES = "python3,python3-venv,libpython3.11,ca-certificates,libstdc++6,libgomp1,zlib1g"
PYTHON_IN_ROOT = "usr/bin/python3.11"
# openvino's aarch64 wheel is manylinux_2_35 (the sysroot is bookworm: glibc 2.36); both older tags are needed too
PIP_PLATFORM = ["--platform", "manylinux_2_35_aarch64", "--platform", "manylinux_2_28_aarch64",
                "--platform", "manylinux_2_27_aarch64", "--python-version", "3.11", "--abi", "cp311",
                "--only-binary=:all:"]
COMPLETE = ".edgeopt-complete"

CPUINFO_A76 = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 108.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n"
    for i in range(4)
)


def device_wheels() -> tuple[str, ...]:
    """numpy and the device runtime (``Backend.device_runtime``) of every backend whose hooks say it runs in the
    emulated sysroot (``emulated``), as pip requirements (``device_requirements``): what the aarch64 site holds."""
    from edgeopt.converters.registry import backend_classes, hooks_of

    return ("numpy", *(req for b, cls in backend_classes().items() if cls.device_runtime and hooks_of(b).emulated
                       for req in hooks_of(b).device_requirements(cls.device_runtime[1])))


def _prepare_site(site: Path) -> None:
    """Each emulated backend's own trimming of its freshly installed packages (``prepare_emulated_site``)."""
    from edgeopt.converters.registry import backend_classes, hooks_of

    for b, cls in backend_classes().items():
        if cls.device_runtime and hooks_of(b).emulated:
            hooks_of(b).prepare_emulated_site(site)


def emulate_cache() -> Path:
    return cache_subdir(CacheArea.EMULATE)


@contextlib.contextmanager
def _locked(name: str):
    d = emulate_cache()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def qemu_binary() -> str:
    from .tools import find_tool

    q = find_tool("qemu-aarch64-static", "qemu-aarch64")
    if not q:
        raise MissingDependencyError("qemu-aarch64-static is not installed (needed to emulate an aarch64 device)",
                                     "install it with: apt-get install qemu-user-static")
    return q


def _run(argv: list[str], what: str, timeout: float = 900) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1][:300]
        raise RemoteError(f"{what} failed (exit {proc.returncode}): {tail}")


def sysroot_dir() -> Path:
    return emulate_cache() / f"sysroot-{SUITE}-arm64"


def ensure_sysroot(notify=None) -> Path:
    root = sysroot_dir()
    with _locked("sysroot"):
        if (root / COMPLETE).is_file():
            return root
        if not shutil.which("mmdebstrap"):
            raise MissingDependencyError("mmdebstrap is not installed (needed to build the aarch64 sysroot)",
                                         "install it with: apt-get install mmdebstrap")
        if os.geteuid() != 0:
            raise RemoteError("building the aarch64 sysroot needs root (mmdebstrap --mode=root)",
                              "run 'edgeopt emulate start' once as root; the sysroot is cached afterwards")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if notify:
            notify(f"building the aarch64 sysroot in {root} (once; ~20 s, needs the Debian mirror)")
        _run(["mmdebstrap", "--mode=root", "--arch=arm64", "--variant=extract", f"--include={PACKAGES}",
              SUITE, str(tmp)], "mmdebstrap")
        (tmp / "proc").mkdir(exist_ok=True)
        (tmp / "proc" / "cpuinfo").write_text(CPUINFO_A76)
        (tmp / COMPLETE).write_text("ok\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)
    return root


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def ensure_site(notify=None) -> Path:
    cache = emulate_cache()
    wheels = cache / "wheels-cp311-aarch64"
    site = cache / "site-cp311-aarch64"
    wheels_wanted = device_wheels()
    with _locked("site"):
        have = installed_wheels(site)
        if have is not None and set(wheels_wanted) <= have:
            return site
        if have is not None:  # built before a wheel was added: add the missing ones in place (a running board keeps going)
            missing = [w for w in wheels_wanted if w not in have]
            if notify:
                notify(f"adding aarch64 wheels ({', '.join(missing)}) to {site} (once)")
            _run([*PIP, "download", "--no-deps", "-d", str(wheels), *PIP_PLATFORM, *missing],
                 "pip download (aarch64 wheels)")
            # --upgrade: a package already there (a dependency of another, or an older pin) is replaced, not skipped
            _run([*PIP, "install", "--no-deps", "--upgrade", "--no-index", "--find-links", str(wheels), "--target",
                  str(site), *PIP_PLATFORM, *missing], "pip install --target (aarch64 site)")
            _prepare_site(site)
            (site / COMPLETE).write_text("\n".join(wheels_wanted) + "\n")
            return site
        if notify:
            notify(f"fetching aarch64 wheels ({', '.join(wheels_wanted)}) into {wheels} (once)")
        _run([*PIP, "download", "-d", str(wheels), *PIP_PLATFORM, *wheels_wanted], "pip download (aarch64 wheels)")
        tmp = site.with_name(site.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _run([*PIP, "install", "--no-index", "--find-links", str(wheels), "--target", str(tmp), *PIP_PLATFORM,
              *wheels_wanted], "pip install --target (aarch64 site)")
        _prepare_site(tmp)
        (tmp / COMPLETE).write_text("\n".join(wheels_wanted) + "\n")
        shutil.rmtree(site, ignore_errors=True)
        os.replace(tmp, site)
    return site


def installed_wheels(site: Path) -> set[str] | None:
    """The wheels a complete site holds (its marker's list; an early marker, "ok", lists none, so every wheel is
    installed over it again); None when it is not complete."""
    marker = site / COMPLETE
    if not marker.is_file():
        return None
    names = {line.strip() for line in marker.read_text().splitlines() if line.strip()}
    return names - {"ok"}


def write_python_wrapper(path: Path, root: Path, site: Path) -> Path:
    """A ``python3`` for the emulated device: the sysroot's python3.11 under qemu, Cortex-A76."""
    q = shlex.quote
    text = (
        "#!/bin/sh\n"
        "# edgeopt emulated aarch64 python (qemu-user): timings under it are emulated, not the board's\n"
        f'PYTHONPATH={q(str(site))}"${{PYTHONPATH:+:$PYTHONPATH}}"; export PYTHONPATH\n'
        f"exec {q(qemu_binary())} -cpu cortex-a76 -L {q(str(root))} {q(str(root / PYTHON_IN_ROOT))} \"$@\"\n"
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return path
