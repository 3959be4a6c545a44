"""Every ``edgeopt`` command the README shows runs here, as written, in the order written.

The commands run through bash in a folder holding what the README's tour names: ``model.onnx`` (the bundled
MNIST CNN), ``calib.npz`` and ``test.npz`` (its real calibration and test data). One thing can't exist here: the
real board at the address the README uses. ``devices add`` still runs as written (it only writes the
inventory); before a ``remote-bench`` on a device whose address is not on this machine, the test points that
inventory entry at an emulated board on loopback (a real sshd running this machine's Python), so the
``remote-bench`` command itself still runs as written.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# a gate flag lets a command end with exit 5 (the gate's verdict) as well as 0
GATE_FLAGS = ("--fail-on-regression",)


def _strip_comment(line: str) -> str:
    """The line without a trailing shell comment (a '#' outside quotes that starts a word)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip()
    return line.strip()


def readme_commands(text: str | None = None) -> list[str]:
    """The ``edgeopt`` commands in the README's shell blocks, in order (``a && b; c`` gives three)."""
    text = README.read_text() if text is None else text
    cmds = []
    for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            for part in re.split(r"\s*(?:&&|;)\s*", _strip_comment(line)):
                if part.startswith("edgeopt "):
                    cmds.append(part)
    return cmds


def test_readme_commands_are_found_and_parse():
    cmds = readme_commands()
    assert len(cmds) >= 15, cmds
    assert any(c.startswith("edgeopt convert ") for c in cmds)
    for c in cmds:
        shlex.split(c)  # every command is valid shell


def test_command_extraction_splits_chains_and_drops_comments():
    text = "x\n```bash\nedgeopt a --x 1  # c # d\nedgeopt b && edgeopt c; echo hi\n```\n```text\nedgeopt no\n```\n"
    assert readme_commands(text) == ["edgeopt a --x 1", "edgeopt b", "edgeopt c"]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _point_device_at_loopback(name: str, started: list) -> None:
    """Before a remote-bench on a device whose address isn't this machine: the same entry, reached on
    an emulated board on loopback (this machine's Python behind a real sshd)."""
    from edgeopt.remote.emulate import start_emulator
    from edgeopt.remote.inventory import add_device, get_device, load_devices

    devices = load_devices()
    if name not in devices or devices[name].emulated or _loopback(devices[name].host):
        return
    board = f"{name}-readme-board"
    start_emulator("host", board)
    started.append(board)
    emu = get_device(board)
    add_device(emu.model_copy(update={"name": name, "profile": devices[name].profile}), replace=True)


@pytest.mark.slow
@pytest.mark.remote
@pytest.mark.tflite
@pytest.mark.openvino
@pytest.mark.tvm
def test_every_readme_command_runs_as_written(remote_env, tmp_path):
    from fixtures_remote import need_tools

    need_tools("sshd", "ssh-keygen", "qemu-aarch64-static", "mmdebstrap")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "fixtures/models/mnist_cnn.onnx", work / "model.onnx")
    shutil.copy(REPO / "fixtures/data/mnist_calib.npz", work / "calib.npz")
    shutil.copy(REPO / "fixtures/data/mnist_test.npz", work / "test.npz")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "edgeopt").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m edgeopt \"$@\"\n")
    (bindir / "edgeopt").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    started: list[str] = []
    failures = []
    try:
        for cmd in readme_commands():
            argv = shlex.split(cmd)
            if argv[1] == "remote-bench":
                _point_device_at_loopback(argv[2], started)
            proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=900)
            allowed = {0} | ({5} if any(f in argv for f in GATE_FLAGS) else set())
            if proc.returncode not in allowed:
                failures.append(f"{cmd!r} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    finally:
        from edgeopt.remote.emulate import stop_emulator

        for name in started:
            stop_emulator(name)
        subprocess.run([sys.executable, "-m", "edgeopt", "emulate", "stop"], env=env,
                       capture_output=True, timeout=120)
    assert not failures, "\n".join(failures)
