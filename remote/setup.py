"""``--setup``: a venv under the device's work dir with the artifact's runtime pip-installed.

Only done when the user asks. Boards without internet get the wheels from the host
(``--wheels DIR``: pushed to ``<work_dir>/wheels`` and installed with ``--no-index``).
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt.errors import BadInputError, EdgeoptError, RemoteError

from .inventory import Device
from .transport import Transport

VENV = "venv"
WHEELS = "wheels"


def _backend(artifact: Path) -> str:
    manifest = json.loads((artifact / "manifest.json").read_text())
    return (manifest.get("runtime") or {}).get("backend") or manifest.get("backend")


def ensure_runtime(transport: Transport, device: Device, python: list[str], artifact: Path,
                   wheels: str | Path | None = None, timeout: float = 1800) -> list[str]:
    """Make ``<work_dir>/venv`` (system site packages visible) and install the artifact's runtime
    into it when it does not import yet; returns the venv's python."""
    if device.emulated and "qemu" in " ".join(python + [device.python]).lower():
        raise RemoteError(f"{device.name}: --setup is not supported on a qemu-emulated device",
                          "its runtimes come from 'edgeopt emulate start'")
    backend = _backend(artifact)
    from edgeopt.converters.registry import get_backend, hooks_of

    try:
        module, requirement = get_backend(backend).device_runtime
    except (EdgeoptError, TypeError) as err:
        raise BadInputError(f"unknown backend '{backend}' in the artifact's manifest") from err
    venv = transport.confine(VENV)
    vpy = f"{venv}/bin/python"
    if transport.run(["test", "-x", vpy], timeout=30).rc != 0:
        res = transport.run([*python, "-m", "venv", "--system-site-packages", venv], timeout=600)
        if res.rc != 0:
            raise RemoteError(f"{device.name}: cannot create a venv: {res.stderr.strip()[-300:]}",
                              "install python3-venv on the device")
    if transport.run([vpy, "-c", f"import {module}"], timeout=600).rc == 0:
        return [vpy]
    pip = [vpy, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if wheels:
        wdir = Path(wheels)
        files = sorted(wdir.glob("*.whl"))
        if not files:
            raise BadInputError(f"--wheels {wdir}: no .whl files there")
        for f in files:
            transport.put(f, f"{WHEELS}/{f.name}")
        pip += ["--no-index", "--find-links", transport.confine(WHEELS)]
    requirements = list(hooks_of(backend).device_requirements(requirement))  # e.g. pinned to this host's version
    res = transport.run([*pip, *requirements], timeout=timeout)
    if res.rc != 0:
        raise RemoteError(f"{device.name}: pip could not install {' '.join(requirements)}: "
                          f"{res.stderr.strip()[-300:]}",
                          "pass --wheels DIR with the device's wheels if it has no internet")
    return [vpy]
