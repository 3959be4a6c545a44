"""A private OpenSSH server on loopback that plays a device (see the package doc)."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from edgeopt.errors import MissingDependencyError, RemoteError, UsageError
from edgeopt.host import pid_alive

from ..inventory import (
    UnknownDeviceError,
    add_device,
    load_devices,
    make_device,
    remove_device,
    unknown_device,
    validate_name,
)
from ..paths import data_dir

LOOPBACK = "127.0.0.1"


def emulate_root() -> Path:
    return data_dir() / "emulate"


def _sshd() -> str:
    from .tools import find_tool

    if (p := find_tool("sshd")):
        return p
    raise MissingDependencyError("OpenSSH server (sshd) is not installed (needed to emulate a device)",
                                 "install it with: apt-get install openssh-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    if path.is_file():
        return
    proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RemoteError(f"ssh-keygen failed: {proc.stderr.strip()[:200]}")


def sshd_config(d: Path, port: int) -> str:
    return "\n".join([
        f"ListenAddress {LOOPBACK}",
        f"Port {port}",
        f"HostKey {d / 'host_ed25519_key'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "PidFile none",
        "UsePAM no",
        "StrictModes no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "Subsystem sftp internal-sftp",
        "LogLevel INFO",
        "",
    ])


def _wait_banner(proc: subprocess.Popen, port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RemoteError(f"sshd exited at start (exit {proc.returncode})", "see the log in the emulator's dir")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RemoteError(f"sshd did not answer on port {port} within {timeout:.0f} s")


def _state_file(name: str) -> Path:
    return emulate_root() / name / "state.json"


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _device_python(profile: str, d: Path, notify) -> tuple[str, dict[str, str]]:
    from edgeopt.profiles import load_profile

    arch = load_profile(profile).arch
    if arch == os.uname().machine:  # same architecture: the host's python, no qemu
        return sys.executable, {}
    if arch != "aarch64":
        raise UsageError(f"cannot emulate a {arch} device here", "profiles: host (x86_64) or an aarch64 one (pi5)")
    from .sysroot import ensure_site, ensure_sysroot, write_python_wrapper

    root = ensure_sysroot(notify)
    site = ensure_site(notify)
    wrapper = write_python_wrapper(d / "python3", root, site)
    return str(wrapper), {"PYTHONPATH": str(site)}


def start_emulator(profile: str = "pi5", name: str | None = None, port: int | None = None, *,
                   devices_path=None, notify=None) -> dict:
    """Start an emulated device and add it to the inventory; returns its state."""
    from edgeopt.profiles import load_profile

    from .sysroot import COMPLETE, sysroot_dir
    from .tools import check_tools

    name = validate_name(name or f"{profile}-emu")
    # every missing system tool named at once, before any work (mmdebstrap only while the sysroot isn't built)
    check_tools(load_profile(profile).arch, sysroot_built=(sysroot_dir() / COMPLETE).is_file())
    d = emulate_root() / name
    old = _read_state(name)
    if old and pid_alive(old.get("pid")):
        raise UsageError(f"emulated device '{name}' is already running (pid {old['pid']}, port {old['port']})",
                         f"stop it with 'edgeopt emulate stop {name}'")
    existing = load_devices(devices_path).get(name)
    if existing and not existing.emulated:
        raise UsageError(f"'{name}' is a real device in the inventory", "pick another --name")
    d.mkdir(parents=True, exist_ok=True)
    python, env = _device_python(profile, d, notify)
    _keygen(d / "host_ed25519_key", f"edgeopt-emulated-host-{name}")
    _keygen(d / "user_ed25519_key", f"edgeopt-emulated-user-{name}")
    shutil.copyfile(d / "user_ed25519_key.pub", d / "authorized_keys")
    port = port or free_port()
    (d / "sshd_config").write_text(sshd_config(d, port))
    try:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # sshd says so itself when it needs it
    work = d / "work"
    work.mkdir(exist_ok=True)
    log = open(d / "sshd.log", "ab")
    try:
        proc = subprocess.Popen([_sshd(), "-D", "-e", "-f", str(d / "sshd_config")], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    finally:
        log.close()
    _wait_banner(proc, port)
    host_pub = (d / "host_ed25519_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[{LOOPBACK}]:{port} {host_pub[0]} {host_pub[1]}\n")
    device = make_device(
        name=name, host=LOOPBACK, port=port, user=getpass.getuser(), key=str(d / "user_ed25519_key"),
        profile=profile, python=python, work_dir=str(work), emulated=True, env=env,
        known_hosts=str(d / "known_hosts"),
    )
    add_device(device, devices_path, replace=True)
    state = {"name": name, "profile": profile, "pid": proc.pid, "port": port, "dir": str(d),
             "python": python, "work_dir": str(work), "started": time.time(),
             "devices_file": str(devices_path) if devices_path else None}
    _write_json(_state_file(name), state)
    return {**state, "running": True, "device": device.model_dump()}


def _read_state(name: str) -> dict | None:
    f = _state_file(name)
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def emulator_status() -> list[dict]:
    root = emulate_root()
    out = []
    for f in sorted(root.glob("*/state.json")) if root.is_dir() else []:
        st = _read_state(f.parent.name)
        if st:
            out.append({**st, "running": pid_alive(st.get("pid"))})
    return out


def _children_of() -> dict[int, list[int]]:
    """ppid -> pids of this machine's processes (from /proc)."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(stat.parent.name))
    return kids


def session_pids(sshd_pid: int | None) -> list[int]:
    """Everything the listening sshd started: its per-connection sessions and what they run (the
    benchmark runner included), found by walking parent PIDs."""
    if not sshd_pid:
        return []
    kids, out, todo = _children_of(), [], [sshd_pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return [p for p in out if pid_alive(p)]


def _terminate(pids: list[int], grace_s: float = 2.5) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _not_emulated(name: str, devices_path) -> UnknownDeviceError:
    """``emulate stop NAME`` of a name no emulator has: exit 3 like any unknown device; a real board of that
    name is said to be one."""
    real = load_devices(devices_path).get(name)
    if real is not None and not real.emulated:
        return UnknownDeviceError(f"'{name}' is a real device, not an emulated one: there is nothing to stop",
                                  "'edgeopt emulate status' lists the emulated devices")
    running = {st["name"]: load_devices(st.get("devices_file") or devices_path).get(st["name"])
               for st in emulator_status()}
    return unknown_device(name, {n: d for n, d in running.items() if d is not None}, "no emulated device of that name",
                          add_hint="no emulated device is running; start one with 'edgeopt emulate start pi5'",
                          example="edgeopt emulate stop {}")


def stop_emulator(name: str | None = None, *, devices_path=None, wait_s: float = 0.0) -> list[dict]:
    """Stop one emulated device (or all of them): its sessions (runs in progress) and its sshd, by PID;
    then drop its inventory entry. With ``wait_s``, first wait that long for running sessions to end."""
    names = [validate_name(name)] if name else [s["name"] for s in emulator_status()]
    if name and _read_state(name) is None:
        raise _not_emulated(name, devices_path)
    stopped = []
    for n in names:
        st = _read_state(n) or {}
        pid = st.get("pid")
        end = time.monotonic() + wait_s
        while wait_s and session_pids(pid) and time.monotonic() < end:
            time.sleep(0.2)
        sessions = session_pids(pid)
        if pid_alive(pid):
            _terminate([pid])  # no new connections first
        _terminate(sessions)  # sshd -D leaves its sessions running: they are ours to stop
        path = devices_path or st.get("devices_file")
        dev = load_devices(path).get(n)
        if dev is not None and dev.emulated:
            remove_device(n, path)
        _state_file(n).unlink(missing_ok=True)
        stopped.append({"name": n, "pid": pid, "stopped": True, "sessions_stopped": len(sessions)})
    return stopped
