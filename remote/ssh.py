"""``SshTransport``: a device reached over SSH (the only module that imports paramiko).

- Host keys are checked against known_hosts (``~/.ssh/known_hosts`` plus the device's own
  file); an unknown key is refused unless ``accept_new_host_key`` is set, which records it and
  prints its SHA256 fingerprint. A changed key is always refused.
- Authentication: the device's key, the SSH agent, the default keys; a password only when a
  person is at the terminal (asked with getpass, never stored or logged).
- ``~/.ssh/config`` host aliases are honoured (HostName, Port, User, IdentityFile).
- Every command line is ``shlex.join(argv)``. Each command is started through a constant
  wrapper that reports its PID first, so that Ctrl-C (or a timeout) can kill the remote process
  (``kill -TERM`` then ``-KILL``) before the channel is closed.
- A dropped connection raises :class:`RemoteError` (exit 6) carrying the output received so far.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import posixpath
import shlex
import sys
import threading
import time
from pathlib import Path

from edgeopt.deps import require
from edgeopt.errors import RemoteError

from .transport import RunResult, StreamCallback, Transport, check_argv

PID_TAG = "@@edgeopt-pid "
# constant script: report the PID, then become the command (same PID)
_WRAPPER = 'echo "@@edgeopt-pid $$" >&2; exec "$@"'


def fingerprint(key) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a paramiko key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _host_id(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class SshTransport(Transport):
    @classmethod
    def for_device(cls, device, *, accept_new_host_key: bool = False, connect_timeout: float = 10.0,
                   notify=None) -> SshTransport:
        """The transport to an inventory ``Device`` of the ssh kind (its host, port, user, key, work dir)."""
        return cls(device.host, port=device.port, user=device.user, key=device.key, work_dir=device.work_dir,
                   known_hosts=device.known_hosts, accept_new_host_key=accept_new_host_key,
                   connect_timeout=connect_timeout, env=dict(device.env), name=device.name, notify=notify)

    def __init__(
        self,
        host: str,
        *,
        port: int | None = None,
        user: str | None = None,
        key: str | None = None,
        work_dir: str = "~/.cache/edgeopt-remote",
        known_hosts: str | None = None,
        accept_new_host_key: bool = False,
        connect_timeout: float = 10.0,
        env: dict[str, str] | None = None,
        name: str | None = None,
        interactive: bool | None = None,
        notify=None,
    ):
        self.paramiko = require("paramiko", "reaching devices over SSH")
        self.name = name or host
        self.env = env or {}
        self.notify = notify or (lambda msg: print(msg, file=sys.stderr))
        cfg = self._ssh_config(host)
        self.host = cfg.get("hostname", host)
        self.port = int(port or cfg.get("port") or 22)
        self.user = user or cfg.get("user") or getpass.getuser()
        key_files = [key] if key else list(cfg.get("identityfile") or [])
        self.key_files = [str(Path(k).expanduser()) for k in key_files]
        self.known_hosts = str(Path(known_hosts).expanduser()) if known_hosts else None
        self.accept_new = accept_new_host_key
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        self.client = self._connect(connect_timeout)
        self._sftp = None
        self.last_pid: int | None = None
        self.work_dir = self._resolve_work_dir(work_dir)

    # ------------------------------------------------------------------ connect
    @staticmethod
    def _ssh_config(host: str) -> dict:
        path = Path("~/.ssh/config").expanduser()
        if not path.is_file():
            return {}
        paramiko = require("paramiko", "reading ~/.ssh/config")
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(host))

    def _policy(self):
        paramiko = self.paramiko
        outer = self

        class Policy(paramiko.MissingHostKeyPolicy):
            def missing_host_key(self, client, hostname, key):
                fp = fingerprint(key)
                if not outer.accept_new:
                    raise RemoteError(
                        f"{outer.name}: host key of {hostname} is unknown ({key.get_name()} {fp}); refusing to connect",
                        "check the fingerprint, then rerun with --accept-new-host-key to trust and record it",
                        details={"fingerprint": fp},
                    )
                client.get_host_keys().add(hostname, key.get_name(), key)
                target = outer.known_hosts or str(Path("~/.ssh/known_hosts").expanduser())
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                with open(target, "a") as f:
                    f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
                outer.notify(f"{outer.name}: trusted new host key {key.get_name()} {fp} for {hostname} (saved in {target})")

        return Policy()

    def _connect(self, timeout: float):
        paramiko = self.paramiko
        client = paramiko.SSHClient()
        client.load_system_host_keys()  # ~/.ssh/known_hosts
        if self.known_hosts and os.path.isfile(self.known_hosts):
            client.load_host_keys(self.known_hosts)
        client.set_missing_host_key_policy(self._policy())
        kwargs = dict(
            hostname=self.host, port=self.port, username=self.user, timeout=timeout,
            banner_timeout=timeout, auth_timeout=timeout, allow_agent=True,
            look_for_keys=not self.key_files, key_filename=self.key_files or None,
        )
        where = f"{self.name} ({self.user}@{self.host}:{self.port})"
        try:
            client.connect(**kwargs)
        except RemoteError:
            client.close()
            raise
        except paramiko.BadHostKeyException as err:
            client.close()
            raise RemoteError(
                f"{where}: HOST KEY CHANGED ({fingerprint(err.key)}, expected {fingerprint(err.expected_key)})",
                "someone may be intercepting the connection; if the device was reinstalled, "
                "remove its old line from known_hosts",
            ) from err
        except paramiko.AuthenticationException as err:
            if self.interactive:
                # a person is here: ask once, use it, forget it
                password = getpass.getpass(f"{self.user}@{self.host}'s password: ")
                try:
                    client.connect(**{**kwargs, "password": password, "look_for_keys": False,
                                      "allow_agent": False, "key_filename": None})
                    return client
                except paramiko.AuthenticationException:
                    pass
                finally:
                    del password
            client.close()
            raise RemoteError(
                f"{where}: authentication failed",
                "check the device's user and key ('edgeopt devices add NAME --key FILE'), or load it into ssh-agent",
            ) from err
        except (TimeoutError, OSError, paramiko.SSHException) as err:
            client.close()
            if isinstance(err, paramiko.ssh_exception.NoValidConnectionsError):  # its text is "[Errno None] ..."
                reason = "; ".join(sorted({(e.strerror or str(e)) if isinstance(e, OSError) else str(e)
                                           for e in err.errors.values()})) or "connection refused"
            else:
                reason = (err.strerror if isinstance(err, OSError) and err.strerror else str(err)) or type(err).__name__
            raise RemoteError(f"{where}: cannot connect: {reason}", "is the device on and reachable?") from err
        return client

    @property
    def sftp(self):
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def _resolve_work_dir(self, work_dir: str) -> str:
        home = self.sftp.normalize(".")
        if work_dir == "~" or work_dir.startswith("~/"):
            work_dir = posixpath.join(home, work_dir[2:])
        elif not work_dir.startswith("/"):
            work_dir = posixpath.join(home, work_dir)
        work_dir = posixpath.normpath(work_dir)
        self._mkdirs(work_dir)
        return self.sftp.normalize(work_dir)

    def _mkdirs(self, path: str) -> None:
        parts = []
        while path not in ("/", ""):
            try:
                self.sftp.stat(path)
                break
            except OSError:
                parts.append(path)
                path = posixpath.dirname(path)
        for p in reversed(parts):
            self.sftp.mkdir(p)

    # ------------------------------------------------------------------ commands
    def command_line(self, argv: list[str]) -> str:
        argv = check_argv(argv)
        env = [f"{k}={v}" for k, v in self.env.items()]
        full = ["sh", "-c", _WRAPPER, "edgeopt", *(["env", *env] if env else []), *argv]
        return shlex.join(full)

    def run(self, argv: list[str], timeout: float, stream: StreamCallback | None = None) -> RunResult:
        line = self.command_line(argv)
        try:
            chan = self.client.get_transport().open_session()
            chan.exec_command(line)
        except (self.paramiko.SSHException, OSError, EOFError) as err:
            raise RemoteError(f"{self.name}: connection lost before '{argv[0]}' started: {err}") from err
        out, err_lines = [], []
        bufs = {"stdout": b"", "stderr": b""}
        self.last_pid = None

        def feed(kind: str, data: bytes, final: bool = False):
            bufs[kind] += data
            *lines, bufs[kind] = bufs[kind].split(b"\n")
            if final and bufs[kind]:
                lines.append(bufs[kind])
                bufs[kind] = b""
            for raw in lines:
                text = raw.decode(errors="replace")
                if kind == "stderr" and self.last_pid is None and text.startswith(PID_TAG):
                    self.last_pid = int(text[len(PID_TAG):])
                    continue
                (out if kind == "stdout" else err_lines).append(text + "\n")
                if stream:
                    stream(kind, text)

        def partial():
            feed("stdout", b"", True)
            feed("stderr", b"", True)
            return {"stdout": "".join(out), "stderr": "".join(err_lines)}

        deadline = time.monotonic() + timeout
        try:
            while True:
                busy = False
                while chan.recv_ready():
                    feed("stdout", chan.recv(65536))
                    busy = True
                while chan.recv_stderr_ready():
                    feed("stderr", chan.recv_stderr(65536))
                    busy = True
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    self._kill(self.last_pid)
                    chan.close()
                    raise RemoteError(f"{self.name}: '{argv[0]}' timed out after {timeout:.0f} s (killed)",
                                      details=partial())
                if self.cancel is not None and self.cancel.is_set():
                    self.cancel = None  # once: clean-up commands after this must still run
                    raise KeyboardInterrupt
                if not busy:
                    time.sleep(0.02)
        except KeyboardInterrupt:
            self._kill(self.last_pid)
            chan.close()
            raise
        alive = self.client.get_transport() is not None and self.client.get_transport().is_active()
        rc = chan.exit_status
        chan.close()
        if not alive or (rc == -1 and not chan.status_event.is_set()):
            raise RemoteError(
                f"{self.name}: connection lost while running '{argv[0]}'",
                "check the device (power, network, sshd); the output received so far is in the details",
                details=partial(),
            )
        res = partial()
        if rc == -1:  # the process was killed by a signal: sshd sends exit-signal, not a status
            rc = 255
        return RunResult(rc, res["stdout"], res["stderr"])

    def _kill(self, pid: int | None) -> None:
        """Kill the remote process by PID (TERM, then KILL), best effort over a fresh channel."""
        if not pid:
            return
        script = 'kill -TERM "$1" 2>/dev/null; i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt 20 ]; do ' \
                 'sleep 0.1; i=$((i+1)); done; kill -KILL "$1" 2>/dev/null; exit 0'
        try:
            chan = self.client.get_transport().open_session(timeout=5)
            chan.exec_command(shlex.join(["sh", "-c", script, "edgeopt-kill", str(pid)]))
            end = time.monotonic() + 5
            while not chan.exit_status_ready() and time.monotonic() < end:
                time.sleep(0.05)
            chan.close()
        except Exception:  # noqa: BLE001 - the connection may be gone already
            pass

    # ------------------------------------------------------------------ files
    def put(self, local, remote: str) -> None:
        dest = self.confine(remote)
        self._check_real_parent(dest)
        try:
            self._mkdirs(posixpath.dirname(dest))
            # per thread too: one command uploading to two devices that share a host and work dir (two labgrid
            # places on one board) must not write the same temp file
            tmp = f"{dest}.part-{os.getpid()}-{threading.get_ident()}"
            self.sftp.put(str(local), tmp)
            try:
                self.sftp.posix_rename(tmp, dest)
            except OSError:  # a server without the posix-rename extension
                try:
                    self.sftp.remove(dest)
                except OSError:
                    pass
                self.sftp.rename(tmp, dest)
        except (OSError, EOFError, self.paramiko.SSHException) as err:
            raise RemoteError(f"{self.name}: upload of {Path(local).name} failed: {err}") from err

    def _check_real_parent(self, dest: str) -> None:
        """Refuse a destination whose existing parent resolves (symlinks) outside the work dir."""
        parent = posixpath.dirname(dest)
        while True:
            try:
                real = self.sftp.normalize(parent)
                break
            except OSError:
                if parent in ("/", ""):
                    return
                parent = posixpath.dirname(parent)
        root = self.work_dir.rstrip("/")
        if real != root and not real.startswith(root + "/"):
            raise RemoteError(f"refusing to write '{dest}' on {self.name}: it resolves outside {root}")

    def get(self, remote: str, local) -> None:
        try:
            self.sftp.get(posixpath.join(self.work_dir, remote), str(local))
        except (OSError, EOFError, self.paramiko.SSHException) as err:
            raise RemoteError(f"{self.name}: download of {remote} failed: {err}") from err

    def sha256(self, remote: str) -> str | None:
        return self.sha256_many([remote])[remote]

    def sha256_many(self, remotes: list[str]) -> dict[str, str | None]:
        """One ``sha256sum`` for all files (missing files map to None)."""
        if not remotes:
            return {}
        full = {posixpath.join(self.work_dir, r): r for r in remotes}
        res = self.run(["sha256sum", "--", *full], timeout=120)
        out: dict[str, str | None] = dict.fromkeys(remotes)
        for line in res.stdout.splitlines():
            digest, _, path = line.partition("  ")
            if path in full and len(digest) == 64:
                out[full[path]] = digest
        return out

    def close(self) -> None:
        try:
            if self._sftp is not None:
                self._sftp.close()
        finally:
            self.client.close()
