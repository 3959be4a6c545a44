"""What ``emulate start`` needs from the system, checked all at once before any work: one line naming
every missing tool with the one ``apt-get install`` that brings them (exit 4)."""

from __future__ import annotations

import os
import shutil

from edgeopt.errors import MissingDependencyError

SBIN = ("/usr/sbin", "/sbin")  # sshd lives there, often outside a user's PATH
# (names, any of which will do) -> the Debian/Ubuntu package that installs them
SSH_TOOLS = {("sshd",): "openssh-server", ("ssh-keygen",): "openssh-client"}
QEMU = {("qemu-aarch64-static", "qemu-aarch64"): "qemu-user-static"}
SYSROOT_BUILDER = {("mmdebstrap",): "mmdebstrap"}


def find_tool(*names: str) -> str | None:
    """The first of ``names`` on PATH, or in /usr/sbin or /sbin."""
    for name in names:
        found = shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None)
        if found:
            return found
    return None


def needed_tools(arch: str, host_arch: str | None = None, *, sysroot_built: bool = False) -> dict[tuple[str, ...], str]:
    """The tools an emulated device of ``arch`` needs here: sshd and ssh-keygen always; for another
    architecture qemu-user, and mmdebstrap while the sysroot is not built yet (``sysroot_built``)."""
    tools = dict(SSH_TOOLS)
    if arch != (host_arch or os.uname().machine):
        tools.update(QEMU)
        if not sysroot_built:
            tools.update(SYSROOT_BUILDER)
    return tools


def check_tools(arch: str, *, sysroot_built: bool = False) -> None:
    """Exit 4 naming every missing tool at once, with the one apt command that installs them all."""
    missing = {names: pkg for names, pkg in needed_tools(arch, sysroot_built=sysroot_built).items()
               if not find_tool(*names)}
    if not missing:
        return
    what = ", ".join(f"{names[0]} (package {pkg})" for names, pkg in missing.items())
    packages = " ".join(dict.fromkeys(missing.values()))
    raise MissingDependencyError(
        f"emulating a {arch} device needs {len(missing)} missing system tool{'s' if len(missing) > 1 else ''}: {what}",
        f"install {'them' if len(missing) > 1 else 'it'} with: apt-get install {packages} (as root)",
        details={"missing": [names[0] for names in missing], "apt_packages": packages.split()},
    )
