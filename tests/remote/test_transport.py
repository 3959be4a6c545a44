"""Transports: argv-only commands, confinement to the work dir, SSH host keys and auth,
dropped connections, timeouts and Ctrl-C (against a real sshd on loopback)."""

from __future__ import annotations

import _thread
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fixtures_remote import kill_sshd_sessions, process_gone

from edgeopt.errors import ExitCode, RemoteError
from edgeopt.remote.transport import LocalTransport

INJECTIONS = ["a b", "$(touch {m})", "`touch {m}`", "'q\"", ";", "touch {m}", "&&", "|", "*", "~", "$HOME", "\\n"]


def _args(marker: Path) -> list[str]:
    return [a.format(m=marker) for a in INJECTIONS]


# ----------------------------------------------------------------------------- local


def test_local_run_is_argv_only(tmp_path):
    marker = tmp_path / "pwned"
    tr = LocalTransport(tmp_path / "work")
    res = tr.run(["printf", "%s\\n", *_args(marker)], timeout=10)
    assert res.rc == 0
    assert res.stdout.splitlines() == _args(marker)
    assert not marker.exists()


def test_local_run_streams_lines_and_reports_rc(tmp_path):
    tr = LocalTransport(tmp_path / "work")
    seen = []
    res = tr.run(["sh", "-c", "echo one; echo two >&2; exit 3"], timeout=10, stream=lambda k, line: seen.append((k, line)))
    assert res.rc == 3 and res.stdout == "one\n" and res.stderr == "two\n"
    assert sorted(seen) == [("stderr", "two"), ("stdout", "one")]


def test_local_timeout_keeps_partial_output(tmp_path):
    tr = LocalTransport(tmp_path / "work")
    with pytest.raises(RemoteError) as e:
        tr.run(["sh", "-c", "echo started; sleep 30"], timeout=1)
    assert "timed out" in e.value.message and "started" in e.value.details["stdout"]


def test_local_put_get_sha256_and_confinement(tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(b"hello")
    tr = LocalTransport(tmp_path / "work")
    tr.put(src, "sub/dir/f.bin")
    assert (tmp_path / "work/sub/dir/f.bin").read_bytes() == b"hello"
    assert tr.sha256("sub/dir/f.bin") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert tr.sha256("missing") is None
    tr.get("sub/dir/f.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == b"hello"
    for bad in ("../outside", "/etc/edgeopt-test", "sub/../../x", str(tmp_path / "outside")):
        with pytest.raises(RemoteError, match="outside the work directory"):
            tr.put(src, bad)
    (tmp_path / "work/link").symlink_to(tmp_path)  # a symlink inside that leads out
    with pytest.raises(RemoteError, match="outside"):
        tr.put(src, "link/escaped")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "outside").exists()


def test_commands_must_be_lists():
    tr = LocalTransport("/tmp")
    with pytest.raises(TypeError):
        tr.run("echo hi", timeout=5)


# ----------------------------------------------------------------------------- ssh


@pytest.mark.remote
def test_ssh_run_keeps_arguments_literal(emulated_x86, remote_env):
    from edgeopt.remote.probe import open_transport

    marker = Path(remote_env["tmp"]) / "pwned"
    with open_transport(emulated_x86["device"]) as tr:
        res = tr.run(["printf", "%s\\n", *_args(marker)], timeout=20)
        assert res.rc == 0, res.stderr
        assert res.stdout.splitlines() == _args(marker)
        assert tr.run(["sh", "-c", "exit 7"], timeout=20).rc == 7
    assert not marker.exists()


@pytest.mark.remote
def test_ssh_writes_outside_work_dir_refused(emulated_x86, remote_env, tmp_path):
    from edgeopt.remote.probe import open_transport

    src = tmp_path / "f.txt"
    src.write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    with open_transport(emulated_x86["device"]) as tr:
        tr.put(src, "ok/f.txt")
        assert tr.sha256("ok/f.txt") == tr.sha256_many(["ok/f.txt"])["ok/f.txt"] is not None
        for bad in ("../f.txt", str(outside / "f.txt"), "ok/../../f.txt"):
            with pytest.raises(RemoteError, match="outside"):
                tr.put(src, bad)
        Path(tr.work_dir, "link").symlink_to(outside)
        with pytest.raises(RemoteError, match="outside"):
            tr.put(src, "link/f.txt")
    assert list(outside.iterdir()) == []


@pytest.mark.remote
def test_unknown_host_key_refused_with_opt_in_hint(emulated_x86, cli, tiny_artifact):
    # the same sshd under another name, without the emulator's known_hosts file
    from edgeopt.remote.inventory import add_device

    add_device(emulated_x86["device"].model_copy(update={"name": "stranger", "known_hosts": None}))
    r = cli("devices", "check", "stranger", "--json")
    assert r.returncode == ExitCode.REMOTE, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "unknown" in err["message"] and "--accept-new-host-key" in err["hint"]
    r = cli("remote-bench", "stranger", str(tiny_artifact))
    assert r.returncode == ExitCode.REMOTE
    assert "refusing to connect" in r.stderr and "--accept-new-host-key" in r.stderr
    assert not list(Path(emulated_x86["device"].work_dir).iterdir())  # nothing was sent


@pytest.mark.remote
def test_accept_new_host_key_prints_fingerprint_and_records_it(emulated_x86, remote_env, cli, tiny_artifact):
    from edgeopt.remote.inventory import add_device

    add_device(emulated_x86["device"].model_copy(update={"name": "stranger", "known_hosts": None}))
    pub = Path(emulated_x86["state"]["dir"]) / "host_ed25519_key.pub"
    expected = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True).stdout.split()[1]
    fast = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1", "--json"]
    r = cli("remote-bench", "stranger", str(tiny_artifact), "--accept-new-host-key", *fast)
    assert r.returncode == 0, r.stderr
    assert expected.startswith("SHA256:") and expected in r.stderr
    assert json.loads(r.stdout)["results"][0]["device"] == "stranger"
    known = Path(remote_env["HOME"], ".ssh", "known_hosts").read_text()
    assert f"[127.0.0.1]:{emulated_x86['state']['port']} ssh-ed25519" in known
    r = cli("remote-bench", "stranger", str(tiny_artifact), *fast)  # now known: no flag needed
    assert r.returncode == 0, r.stderr
    assert expected not in r.stderr


@pytest.mark.remote
def test_wrong_user_key_refused(emulated_x86, remote_env, cli, tmp_path):
    from edgeopt.remote.inventory import add_device

    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    add_device(emulated_x86["device"].model_copy(update={"name": "wrongkey", "key": str(other)}))
    r = cli("devices", "check", "wrongkey", "--json")
    assert r.returncode == ExitCode.REMOTE
    assert "authentication failed" in json.loads(r.stdout)["error"]["message"]


@pytest.mark.remote
def test_dropped_connection_is_remote_error_with_partial_output(emulated_x86):
    from edgeopt.remote.probe import open_transport

    started = threading.Event()
    tr = open_transport(emulated_x86["device"])
    try:
        def watch(kind, line):
            if line == "started":
                started.set()

        def killer():
            if started.wait(20):
                kill_sshd_sessions(emulated_x86["pid"])

        t = threading.Thread(target=killer)
        t.start()
        with pytest.raises(RemoteError) as e:
            tr.run(["sh", "-c", "echo started; echo half-done >&2; sleep 60"], timeout=60, stream=watch)
        t.join()
    finally:
        tr.close()
    assert e.value.exit_code == ExitCode.REMOTE
    assert "connection lost" in e.value.message
    assert "started" in e.value.details["stdout"] and "half-done" in e.value.details["stderr"]


@pytest.mark.remote
def test_ctrl_c_kills_the_remote_process(emulated_x86):
    from edgeopt.remote.probe import open_transport

    started = threading.Event()

    def interrupt():
        if started.wait(20):
            _thread.interrupt_main()

    with open_transport(emulated_x86["device"]) as tr:
        t = threading.Thread(target=interrupt)
        t.start()
        with pytest.raises(KeyboardInterrupt):
            tr.run(["sh", "-c", "echo started; exec sleep 60"], timeout=60,
                   stream=lambda k, line: started.set() if line == "started" else None)
        t.join()
        pid = tr.last_pid
        assert pid and process_gone(pid)
        assert tr.run(["true"], timeout=20).rc == 0  # the connection is still usable


@pytest.mark.remote
def test_ssh_timeout_kills_the_remote_process(emulated_x86):
    from edgeopt.remote.probe import open_transport

    with open_transport(emulated_x86["device"]) as tr:
        with pytest.raises(RemoteError, match="timed out") as e:
            tr.run(["sh", "-c", "echo started; exec sleep 60"], timeout=1.5)
        assert "started" in e.value.details["stdout"]
        assert process_gone(tr.last_pid)


@pytest.mark.remote
def test_ssh_config_alias_is_honoured(emulated_x86, remote_env):
    from edgeopt.remote.inventory import make_device
    from edgeopt.remote.probe import open_transport

    dev = emulated_x86["device"]
    Path(remote_env["HOME"], ".ssh", "config").write_text(
        f"Host lab-pi\n  HostName 127.0.0.1\n  Port {dev.port}\n  User {dev.user}\n  IdentityFile {dev.key}\n"
    )
    alias = make_device(name="alias", host="lab-pi", profile="host", work_dir=dev.work_dir, known_hosts=dev.known_hosts)
    with open_transport(alias) as tr:
        assert (tr.host, tr.port, tr.user) == ("127.0.0.1", dev.port, dev.user)
        assert tr.run(["echo", "hi"], timeout=20).stdout == "hi\n"


def test_missing_paramiko_names_the_extra(monkeypatch):
    from edgeopt.errors import MissingDependencyError
    from edgeopt.remote.ssh import SshTransport

    monkeypatch.setitem(sys.modules, "paramiko", None)  # as if not installed
    with pytest.raises(MissingDependencyError) as e:
        SshTransport("127.0.0.1", port=1)
    assert e.value.exit_code == ExitCode.MISSING_DEPENDENCY and "edgeopt[remote]" in e.value.hint
