"""The CLI's contract: --version, doctor, one JSON object with --json (also on errors), exit codes,
no tracebacks for bad input unless --debug."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

import edgeopt


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def _one_json_object(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line on stdout, got {len(lines)}: {stdout[:300]!r}"
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


def test_version(cli):
    r = cli("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"edgeopt {edgeopt.__version__}"


@pytest.fixture(scope="module")
def doctor_report():
    from tests.conftest import run_cli

    r = run_cli("doctor", "--json")
    assert r.returncode == 0, r.stderr
    return _one_json_object(r.stdout)


@pytest.mark.parametrize("dist", ["onnxruntime", "openvino", "apache-tvm"])
def test_doctor_lists_runtime_versions(doctor_report, dist):
    entry = next(r for r in doctor_report["runtimes"] if r["name"] == dist)
    try:
        expected = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        expected = None
    assert entry["version"] == expected
    assert entry["installed"] is (expected is not None)


def test_doctor_imports_fast_runtimes_and_names_onnxruntime_providers(doctor_report):
    ort = next(r for r in doctor_report["runtimes"] if r["name"] == "onnxruntime")
    assert ort["imports"] is True and "CPUExecutionProvider" in ort["providers"]
    tf = next(r for r in doctor_report["runtimes"] if r["name"] == "tensorflow")
    assert tf.get("imports") is None  # not imported by default: it takes seconds


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux /proc/cpuinfo")
def test_doctor_reports_this_cpu_isa_and_memory(doctor_report):
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            flags = set(line.split(":", 1)[1].split())
            break
    cpu = doctor_report["cpu"]
    assert cpu["isa"] and set(cpu["isa"]) <= flags
    assert cpu["features"]["vnni"] == bool(flags & {"avx512_vnni", "avx_vnni"})
    assert cpu["features"]["amx"] == bool(flags & {"amx_int8", "amx_bf16"})
    assert doctor_report["memory"]["total_gb"] > 0


def test_doctor_reports_tools_with_apt_packages(doctor_report):
    tools = doctor_report["tools"]
    expected = {"aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64-static": "qemu-user-static",
                "sshd": "openssh-server"}
    for tool, apt in expected.items():
        assert tools[tool]["apt"] == apt
        assert tools[tool]["install"] == f"sudo apt-get install -y {apt}"
        assert tools[tool]["found"] == (tools[tool]["path"] is not None)


@pytest.mark.parametrize("args", [
    ("profiles", "list", "--json"),
    ("profiles", "show", "rpi4", "--json"),
    ("profiles", "validate", "device_profiles/pi5.yaml", "--json"),
])
def test_json_output_is_one_object(cli, repo, args):
    r = cli(*args, cwd=str(repo))
    assert r.returncode == 0, r.stderr
    assert _one_json_object(r.stdout)["ok"] is True


@pytest.mark.parametrize("args, code", [
    (("profiles", "show", "pi6", "--json"), 3),
    (("profiles", "validate", "no/such/file.yaml", "--json"), 3),
    (("profiles", "list", "--profile-dir", "no/such/dir", "--json"), 3),
    (("profiles", "show", "--json"), 2),  # missing argument: a usage error
])
def test_json_errors_are_one_object_and_no_traceback(cli, args, code):
    r = cli(*args)
    assert r.returncode == code, r.stderr
    out = _one_json_object(r.stdout)
    assert out["ok"] is False and out["error"]["exit_code"] == code
    assert "Traceback" not in r.stderr


def test_usage_error_exits_2(cli):
    r = cli("profiles", "frobnicate")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_bad_input_is_one_line_on_stderr(cli):
    r = cli("profiles", "show", "pi6")
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgeopt: error: ")


def test_debug_shows_the_traceback(cli):
    r = cli("--debug", "profiles", "show", "pi6")
    assert r.returncode == 3
    assert "Traceback (most recent call last)" in r.stderr and "BadProfileError" in r.stderr


@pytest.mark.slow
def test_doctor_full_imports_every_installed_runtime(cli):
    r = cli("doctor", "--full", "--json")
    assert r.returncode == 0, r.stderr
    report = _one_json_object(r.stdout)
    assert report["imports_checked"] == "all"
    broken = [(x["name"], x.get("import_error")) for x in report["runtimes"] if x["installed"] and not x["imports"]]
    assert broken == []
