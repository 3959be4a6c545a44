"""The firmware walk-through (docs/guide/firmware-microcontrollers.md) as written: its C file compiles for the
Cortex-M7 with the header the walk-through's int8-io build writes, and its commands print the figures the guide
shows (the arena to the bisection's 64 bytes, flash exactly with the same compiler)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide" / "firmware-microcontrollers.md"
M7_FLAGS = ["-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"]
ARENA_MARGIN = 64  # the arena bisection's resolution (edgeopt.converters.backends.tflite.micro.tflm.ARENA_RESOLUTION)


def _bench(module: str):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return __import__(module)
    finally:
        sys.path.remove(str(REPO / "bench"))


def _walkthrough_json() -> dict:
    """The JSON the guide's generated blocks come from (the source docs_tables names for them)."""
    table = next(t for t in _bench("docs_tables").TABLES if t.name == "firmware_convert")
    return json.loads((REPO / table.sources[0]).read_text())


def _guide_c_file() -> str:
    """The C block of the guide's "In your firmware" section."""
    section = GUIDE.read_text().split("## 4. In your firmware", 1)[1]
    return re.search(r"```c\n(.*?)```", section, re.S).group(1)


def _compile(c_text: str, header: str, work: Path) -> subprocess.CompletedProcess:
    (work / "model_data.h").write_text(header)
    (work / "firmware.c").write_text(c_text)
    return subprocess.run(["arm-none-eabi-gcc", *M7_FLAGS, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2",
                           "-I", str(work), "-c", str(work / "firmware.c"), "-o", str(work / "firmware.o")],
                          capture_output=True, text=True, timeout=120, check=False)


def _need_gcc() -> None:
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (Debian: apt-get install gcc-arm-none-eabi)")


def test_the_guides_c_file_compiles_for_the_cortex_m7(tmp_path):
    _need_gcc()
    header = _walkthrough_json()["builds"]["convert_int8_io"]["header"]
    done = _compile(_guide_c_file(), header, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "EDGEOPT_ARENA_BYTES" in _guide_c_file() and "EDGEOPT_INPUT0_SCALE" in _guide_c_file()


def _guide_commands() -> list[tuple[str, str]]:
    """(command, the console block's text after it) for each ``$ edgeopt analyze|convert`` the guide shows."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", GUIDE.read_text(), re.S):
        m = re.match(r"\$ (edgeopt (?:analyze|convert) (?:[^\n]*\\\n)*[^\n]*)\n(.*)", block, re.S)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _figure(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _check_gate(command: str, run: dict, recorded: dict, work: Path) -> None:
    """A memory-gate command of the guide did as recorded: the same exit code, the same gate line (the prediction
    is arithmetic), and its output folder written or not as then."""
    printed = "\n".join(run["lines"])
    assert run["returncode"] == recorded["returncode"], printed[-2000:]
    assert recorded["gate_line"] in run["lines"], (command, printed[-2000:])
    out = work / re.search(r"-o (\S+)$", command).group(1)
    assert out.exists() == recorded["written"], (command, sorted(p.name for p in work.iterdir()))
    assert not [p for p in work.iterdir() if p.name.startswith(f".{out.name}")], "a half-written output was left"


def test_the_guide_shows_the_gates_refusal_and_adaptation_as_recorded():
    """The memory gate's two runs in the guide are the recorded ones: a refusal with exit code 5, the figures
    and nothing written, and an adaptation that built INT8 for FP32 asked for."""
    runs = _walkthrough_json()["commands"]
    refuse, adapt = runs["refuse"], runs["adapt"]
    assert refuse["returncode"] == 5 and not refuse["written"]
    assert re.match(r"edgeopt: error: memory: tflite int8 needs [\d.]+ KB \(arena .*runtime .*\), stm32h7 has 6 KB",
                    refuse["gate_line"])
    assert adapt["returncode"] == 0 and adapt["written"] and adapt["precision"] == "int8"
    assert adapt["adapted"]["requested"] == "fp32" and adapt["adapted"]["chosen"].startswith("int8")
    guide = GUIDE.read_text()
    assert refuse["gate_line"] in guide and adapt["gate_line"] in guide


@pytest.mark.slow
@pytest.mark.tflite
def test_the_walkthroughs_commands_print_the_guides_figures(tmp_path):
    pytest.importorskip("tflite_micro", reason="the micro extra (tflite-micro) is not installed")
    _need_gcc()
    walk = _bench("firmware_walkthrough")
    commands = _guide_commands()
    assert [c.split()[1] for c, _ in commands] == ["analyze", "convert", "convert", "convert", "convert"]
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    recorded = _walkthrough_json()["commands"]
    gates = {recorded[k]["command"]: recorded[k] for k in ("refuse", "adapt")}
    compiler = subprocess.run(["arm-none-eabi-gcc", "--version"], capture_output=True, text=True,
                              check=False).stdout.split("\n")[0]
    same_compiler = compiler == _walkthrough_json()["builds"]["convert"]["firmware"]["compiler"]
    for command, shown in commands:
        run = walk.run_command(command, tmp_path)
        printed = "\n".join(run["lines"])
        if command in gates:
            _check_gate(command, run, gates[command], tmp_path)
            continue
        assert run["returncode"] == 0, printed[-2000:]
        for memory in (ln for ln in shown.splitlines() if ln.startswith("memory (estimate")):
            assert memory in printed  # the prediction is arithmetic: the same everywhere
        if "convert" not in command:
            continue
        arena, flash = r"arena: (\d+) bytes", r"flash (\d+) bytes"
        assert abs(_figure(arena, printed) - _figure(arena, shown)) <= ARENA_MARGIN, (command, printed)
        if same_compiler:
            assert _figure(flash, printed) == _figure(flash, shown), (command, printed)
    out = re.search(r"-o (\S+)$", commands[-1][0]).group(1)  # the int8-io build's header with the guide's C file
    done = _compile(_guide_c_file(), (tmp_path / out / "model_data.h").read_text(), tmp_path)
    assert done.returncode == 0, done.stderr
    if not same_compiler:
        pytest.skip(f"flash not compared: {compiler!r} is not the compiler the guide's figures come from")
