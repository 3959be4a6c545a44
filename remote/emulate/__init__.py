"""Emulated devices: a real OpenSSH ``sshd`` on 127.0.0.1, and (for aarch64 profiles) a Python
that runs under qemu-user in a Debian arm64 sysroot.

``start_emulator("pi5")`` generates host and user keys, starts ``sshd -D -e -f CONFIG`` on a free
high port, writes its known_hosts line and adds an inventory entry (``emulated = true``).
State (PID, port, directories) lives in ``$EDGEOPT_DATA_DIR/emulate/<name>/state.json``;
``stop_emulator`` kills by that PID. Timings on an emulated device are labelled "emulated".
"""

from .sshd import emulator_status, start_emulator, stop_emulator

__all__ = ["start_emulator", "stop_emulator", "emulator_status"]
