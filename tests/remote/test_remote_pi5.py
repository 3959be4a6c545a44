"""An artifact built for the Raspberry Pi 5 really runs on the emulated Cortex-A76 (aarch64 Python 3.11
under qemu-user, LiteRT's aarch64 wheel) and gives the host's LiteRT outputs; emulated devices are
pinned to their profile's core count where this machine has more cores than the profile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from fixtures_remote import DIGITS_CALIB, DIGITS_MODEL, host_litert_outputs

from edgeopt.remote.cores import core_plan, parse_cpu_list, pin_argv
from edgeopt.remote.inventory import add_device, make_device

FAST = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1"]


def _bench_json(r) -> dict:
    assert r.returncode == 0, r.stderr[-3000:]
    payload = json.loads(r.stdout)
    assert payload["ok"] and payload["failed"] == []
    (res,) = payload["results"]
    return res


def _assert_emulated_aarch64(res: dict) -> None:
    """Every place that carries timings says 'emulated'; the runner itself ran on (emulated) aarch64."""
    assert res["location"] == "emulated" and res["emulated"] is True
    assert res["environment"]["location"] == "emulated" and "emulated" in res["timings_label"]
    assert res["device"] == "pi5-emu" and res["device_profile"] == "pi5"
    assert res["environment"]["cpu"]["arch"] == "aarch64" and "asimddp" in res["environment"]["cpu"]["isa"]
    assert "ai-edge-litert" in res["environment"]["libraries"]
    assert res["device_facts"]["arch"] == os.uname().machine  # the shell is the emulating host's
    assert res["latency_ms"]["n"] >= 3 and res["inputs"]["synthetic"] is False


def _assert_cores(res: dict, profile_cores: int) -> None:
    cores = res["cores"]
    assert cores["profile_cores"] == profile_cores
    if cores["device_cores"] > profile_cores:
        assert len(cores["pinned"]) == profile_cores and cores["used"] == cores["pinned"]
    else:  # fewer cores here than the board has: all of them, and the record says so
        assert cores["pinned"] is None and len(cores["used"]) == cores["device_cores"] and cores["note"]


# ----------------------------------------------------------------------------- fast: core limits


def test_cpu_list_parsing():
    assert parse_cpu_list("0-3,6") == [0, 1, 2, 3, 6]
    assert parse_cpu_list("5") == [5] and parse_cpu_list("") == [] and parse_cpu_list("x-1") == []


def test_core_plan_pins_only_emulated_devices_with_spare_cores(tmp_path):
    emu = make_device(name="e", host="127.0.0.1", profile="pi5", emulated=True)
    facts = {"cpus_allowed": "0-7", "taskset": "/usr/bin/taskset"}
    plan = core_plan(emu, facts, None)
    assert plan["pinned"] == [0, 1, 2, 3] and plan["threads"] == 4
    assert pin_argv(["python3", "-m", "x"], plan) == ["taskset", "-c", "0,1,2,3", "python3", "-m", "x"]
    assert core_plan(emu, facts, 2)["threads"] == 2  # --threads wins
    assert core_plan(emu, {**facts, "cpus_allowed": "0-3"}, None)["pinned"] is None
    assert core_plan(emu, {**facts, "taskset": None}, None)["pinned"] is None
    real = emu.model_copy(update={"emulated": False})
    plan = core_plan(real, facts, None)
    assert plan["pinned"] is None and pin_argv(["python3"], plan) == ["python3"]


def _one_core_profile(tmp_path: Path) -> Path:
    import re
    from importlib.resources import files

    from edgeopt.profiles import load_profile

    text = (files("edgeopt.device_profiles") / "x86-avx512.yaml").read_text().replace("name: x86-avx512", "name: x86-1core").replace("cores: 56", "cores: 1")
    text = re.sub(r"(?m)^(aliases|family|family_default):.*$", "", text)  # its names stay x86-avx512's alone
    path = tmp_path / "x86-1core.yaml"
    path.write_text(text)
    assert load_profile(str(path)).compute_units[0].cores == 1
    return path


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_emulated_x86_is_pinned_to_the_profiles_cores(emulated_x86, tiny_artifact, cli, tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs a machine with 2 or more cores")
    profile = _one_core_profile(tmp_path)
    add_device(emulated_x86["device"].model_copy(update={"name": "x86-1core", "profile": str(profile)}))
    r = cli("remote-bench", "x86-1core", str(tiny_artifact), *FAST, "--json")
    res = _bench_json(r)
    assert res["location"] == "emulated"
    assert res["cores"]["profile_cores"] == 1 and res["cores"]["device_cores"] == len(allowed)
    assert res["cores"]["pinned"] == [allowed[0]] and res["cores"]["used"] == [allowed[0]]
    assert res["environment"]["cores_used"] == [allowed[0]] and res["threads"] == 1
    # the plain x86 device (profile 'host': as many cores as this machine) is not pinned
    res = _bench_json(cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST, "--json"))
    assert res["cores"]["pinned"] is None and res["environment"]["cores_used"] == allowed


# ----------------------------------------------------------------------------- slow: the emulated Pi 5


@pytest.mark.remote
@pytest.mark.tflite
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_pi5_tflite_artifact_runs_on_emulated_a76(emulated_pi5, pi5_tflite_artifacts, digits_input, cli, tmp_path,
                                                  precision):
    artifact = pi5_tflite_artifacts(precision)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["profile"] == "pi5" and manifest["backend"] == "tflite" and manifest["precision"] == precision
    out = tmp_path / "device_outputs.npz"
    res = _bench_json(cli("remote-bench", "pi5-emu", str(artifact), "--inputs", str(digits_input),
                          "--outputs-out", str(out), *FAST, "--json"))
    _assert_emulated_aarch64(res)
    _assert_cores(res, 4)
    assert res["backend"] == "tflite" and res["precision"] == precision and res["converted"] is None
    assert res["artifact"] == str(artifact.resolve())

    device = np.load(out)
    host = host_litert_outputs(artifact, digits_input)
    assert sorted(device.files) == sorted(host) == ["logits"]
    d, h = device["logits"], host["logits"]
    assert d.shape == h.shape == (1, 10) and np.isfinite(d).all()
    assert np.argmax(d) == np.argmax(h)
    if precision == "fp32":
        np.testing.assert_allclose(d, h, rtol=1e-4, atol=1e-5)
    else:  # int8 kernels differ between x86 and Arm at most by a rounding step of the output scale
        assert np.abs(d - h).max() <= 0.02 * np.abs(h).max()


@pytest.mark.remote
@pytest.mark.tflite
@pytest.mark.slow
def test_pi5_model_is_converted_for_the_profile_and_stored(emulated_pi5, digits_input, cli, tmp_path):
    """A model (not an artifact): converted for pi5's profile (tflite first, int8 by default), run on the
    emulated board, stored with the device's facts and location 'emulated'."""
    out = tmp_path / "device_outputs.npz"
    res = _bench_json(cli("remote-bench", "pi5-emu", str(DIGITS_MODEL), "--calib", str(DIGITS_CALIB),
                          "--inputs", str(digits_input), "--outputs", str(out), *FAST, "--json"))
    _assert_emulated_aarch64(res)
    assert res["backend"] == "tflite" and res["precision"] == "int8" and res["profile"] == "pi5"
    assert res["converted"]["model"] == str(DIGITS_MODEL.resolve()) and res["converted"]["profile"] == "pi5"
    assert res["artifact"] is None  # converted into a temporary dir that is gone
    logits = np.load(out)["logits"]
    assert logits.shape == (1, 10) and np.isfinite(logits).all()

    from edgeopt.results import get_run, list_runs

    rows = list_runs(device="pi5-emu")
    assert [(r["id"], r["location"], r["backend"]) for r in rows] == [(res["run_id"], "emulated", "tflite")]
    row = get_run(res["run_id"])
    assert row["location"] == "emulated" and row["device"] == "pi5-emu"
    stored = row["result"]
    assert stored["location"] == "emulated" and stored["environment"]["location"] == "emulated"
    assert stored["device_facts"]["arch"] == res["device_facts"]["arch"] and "emulating host" in stored["device_facts"]["note"]
    assert stored["environment"]["cpu"]["arch"] == "aarch64" and "emulated" in stored["timings_label"]
