"""Running artifacts on other machines: transports (local, SSH), the device inventory,
deploy + benchmark over SSH, and emulated devices (a real sshd, qemu-user for aarch64).

paramiko is imported only in :mod:`edgeopt.remote.ssh`, and only when a device is reached.
"""
