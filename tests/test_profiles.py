"""Device profiles: the shipped YAMLs, the schema's errors (with hints), user profile directories, ``host``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from edgeopt.enums import BackendName, SourceKind, UnitKind
from edgeopt.errors import BadProfileError
from edgeopt.profiles import available_profiles, load_profile, parse_profile, profile_index, resolve_profile

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.stem for p in (REPO / "device_profiles").glob("*.yaml"))
EXPECTED = {"pi5", "rpi4", "jetson-orin-nano", "jetson-agx-orin", "intel-npu", "x86-avx512"}


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def _pi5_data() -> dict:
    return yaml.safe_load((REPO / "device_profiles" / "pi5.yaml").read_text())


def _write(tmp_path: Path, data: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --------------------------------------------------------------------------- shipped profiles


def test_the_expected_profiles_ship():
    assert EXPECTED <= set(SHIPPED)
    assert EXPECTED | {"host"} <= set(available_profiles())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads_and_every_number_has_a_source(name):
    p = load_profile(name)
    assert p.name == name and not p.detected
    assert p.missing_sources(required_only=False) == []
    for unit in p.compute_units:
        src = p.source_for(f"compute_units.{unit.kind.value}.peak_gops.int8")
        assert src is not None and src.ref.strip()
        assert unit.peak_gops.int8 is not None
        if unit.sparse_peak_gops is not None:
            assert p.source_for(f"compute_units.{unit.kind.value}.sparse_peak_gops.int8") is not None
    assert p.source_for("memory.bandwidth_gbps") is not None
    for key, src in p.sources.items():
        # a derived number must say how (formula), an estimate must say why
        if src.kind in (SourceKind.DERIVED, SourceKind.ESTIMATE):
            assert src.note.strip(), key


@pytest.mark.parametrize("name", ["pi5", "rpi4"])
def test_arm_cpu_profiles_prefer_tflite_then_onnxruntime_then_openvino_then_tvm(name):
    p = load_profile(name)
    assert [b.name for b in p.backends] == [BackendName.TFLITE, BackendName.ONNXRUNTIME, BackendName.OPENVINO,
                                            BackendName.TVM]
    target = p.backend(BackendName.TVM).settings["target"]
    assert target["kind"] == "llvm" and target["mtriple"] == "aarch64-linux-gnu"
    assert target["num-cores"] == p.unit(UnitKind.CPU).cores


def test_pi5_has_dotprod_and_rpi4_does_not():
    pi5, rpi4 = load_profile("pi5").unit(UnitKind.CPU), load_profile("rpi4").unit(UnitKind.CPU)
    assert pi5.has_feature("dotprod") and pi5.has_feature("neon")
    assert rpi4.has_feature("neon") and not rpi4.has_feature("dotprod")
    assert rpi4.peak_gops.fp16 is None  # Armv8.0: no FP16 arithmetic
    # the derived peak follows the formula in its source note: cores x GHz x 16 FLOP/cycle
    assert pi5.peak_gops.fp32 == pytest.approx(pi5.cores * pi5.clock_ghz * 16)
    assert pi5.peak_gops.int8 == pytest.approx(4 * pi5.peak_gops.fp32)


@pytest.mark.parametrize("name", ["x86-avx512", "intel-npu"])
def test_x86_profiles_put_tvm_last(name):
    p = load_profile(name)
    assert p.arch == "x86_64"
    assert p.backends[-1].name == BackendName.TVM
    assert p.preferred_backend.name == BackendName.OPENVINO


def test_x86_avx512_profile_has_vnni_and_amx():
    cpu = load_profile("x86-avx512").unit(UnitKind.CPU)
    assert cpu.has_feature("vnni") and cpu.has_feature("amx") and cpu.has_feature("avx512")
    assert cpu.peak_gops.int8 > cpu.peak_gops.bf16 > cpu.peak_gops.fp32


@pytest.mark.parametrize("name", ["jetson-orin-nano", "jetson-agx-orin"])
def test_jetson_profiles_have_sparse_tensor_cores_and_a_cuda_target(name):
    p = load_profile(name)
    gpu = p.unit(UnitKind.GPU)
    assert gpu is not None and "sm_87" in gpu.isa
    assert gpu.sparse_peak_gops.int8 == pytest.approx(2 * gpu.peak_gops.int8)
    assert gpu.sparse_peak_gops.fp16 == pytest.approx(2 * gpu.peak_gops.fp16)
    assert p.default_chain.sparsity_2_4
    tvm = p.backend(BackendName.TVM)
    assert tvm.unit == UnitKind.GPU
    target = tvm.settings["target"]
    assert target["kind"] == "cuda" and target["arch"] == "sm_87"
    assert target["host"]["mcpu"] == "cortex-a78ae"


def test_intel_npu_profile_needs_static_shapes_and_targets_the_npu():
    p = load_profile("intel-npu")
    assert p.requires_static_shapes
    assert {u.kind for u in p.compute_units} == {UnitKind.CPU, UnitKind.GPU, UnitKind.NPU}
    assert p.preferred_backend.unit == UnitKind.NPU
    assert p.preferred_backend.settings["device"] == "NPU"


@pytest.mark.tvm
def test_tvm_targets_of_shipped_profiles_build_in_tvm():
    tvm = pytest.importorskip("tvm")
    for name in SHIPPED:
        p = load_profile(name)
        for b in p.backends:
            if b.name != BackendName.TVM:
                continue
            target = tvm.target.Target(b.settings["target"])
            llvm = target.host if target.kind.name == "cuda" else target
            if p.arch == "aarch64":  # TVM's view of the CPU agrees with the profile's ISA list
                cpu = p.unit(UnitKind.CPU)
                assert bool(llvm.attrs["feature.has_dotprod"]) == cpu.has_feature("dotprod"), name


# --------------------------------------------------------------------------- schema errors (in-process)


def _error(data) -> BadProfileError:
    with pytest.raises(BadProfileError) as exc:
        parse_profile(data, "test.yaml")
    return exc.value


def test_unknown_nested_key_in_a_list_of_units_gets_did_you_mean():
    data = _pi5_data()
    data["compute_units"][0]["peak_gops"]["fp61"] = data["compute_units"][0]["peak_gops"].pop("fp16")
    err = _error(data)
    assert "compute_units[0].peak_gops.fp61" in err.message
    assert err.hint == "did you mean 'fp16'?"
    assert "more problems" not in err.message  # the consequences of the typo are not counted


def test_misspelt_backend_name_gets_did_you_mean():
    data = _pi5_data()
    data["backends"][1]["name"] = "onnxruntim"
    err = _error(data)
    assert "backends[1].name" in err.message and err.hint == "did you mean 'onnxruntime'?"


def test_source_key_that_names_no_number_is_an_error_with_a_hint():
    data = _pi5_data()
    data["sources"]["memory.bandwith_gbps"] = data["sources"].pop("memory.bandwidth_gbps")
    err = _error(data)
    assert "memory.bandwith_gbps" in err.message and err.hint == "did you mean 'memory.bandwidth_gbps'?"


def test_backend_on_a_missing_unit_is_an_error():
    data = _pi5_data()
    data["backends"][0]["unit"] = "gpu"
    assert "lacks" in _error(data).message


def test_missing_sources_are_reported_not_fatal():
    data = _pi5_data()
    del data["sources"]["memory.bandwidth_gbps"]
    assert parse_profile(data, "x").missing_sources() == ["memory.bandwidth_gbps"]


# --------------------------------------------------------------------------- through the CLI


def test_validate_unknown_key_under_memory_exits_3_with_did_you_mean(cli, tmp_path):
    data = _pi5_data()
    data["memory"]["bandwith_gbps"] = data["memory"].pop("bandwidth_gbps")
    r = cli("profiles", "validate", str(_write(tmp_path, data)))
    assert r.returncode == 3, r.stderr
    assert "memory.bandwith_gbps" in r.stderr and "did you mean 'bandwidth_gbps'" in r.stderr
    assert "Traceback" not in r.stderr


def test_validate_unknown_top_level_key_exits_3_with_did_you_mean(cli, tmp_path):
    data = _pi5_data()
    data["compute_unit"] = data.pop("compute_units")
    r = cli("profiles", "validate", str(_write(tmp_path, data)), "--json")
    assert r.returncode == 3
    err = json.loads(r.stdout)["error"]
    assert err["exit_code"] == 3 and err["hint"] == "did you mean 'compute_units'?"


def test_validate_wrong_type_exits_3_with_the_key_path(cli, tmp_path):
    data = _pi5_data()
    data["memory"]["bandwidth_gbps"] = "fast"
    r = cli("profiles", "validate", str(_write(tmp_path, data)), "--json")
    assert r.returncode == 3
    err = json.loads(r.stdout)["error"]
    assert err["details"]["path"] == "memory.bandwidth_gbps"
    assert "'memory.bandwidth_gbps'" in r.stderr and "fast" in r.stderr


@pytest.mark.parametrize("content, expected", [
    (None, "not found"),
    ("tdp_w: 1\ntdp_w: 2\n", "duplicate key 'tdp_w'"),
    ("name: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "must be a YAML mapping"),
])
def test_validate_bad_files_exit_3(cli, tmp_path, content, expected):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    r = cli("profiles", "validate", str(path))
    assert r.returncode == 3, r.stderr
    assert expected in r.stderr and "Traceback" not in r.stderr


def test_validate_good_file_exits_0_and_warns_about_unsourced_numbers(cli, tmp_path):
    data = _pi5_data()
    del data["sources"]["tdp_w"]
    r = cli("profiles", "validate", str(_write(tmp_path, data)), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["valid"] and out["name"] == "pi5"
    assert len(out["warnings"]) == 1 and "tdp_w" in out["warnings"][0]


def test_unknown_profile_name_exits_3_with_did_you_mean(cli):
    r = cli("profiles", "show", "pi6")
    assert r.returncode == 3
    assert "unknown device profile 'pi6'" in r.stderr and "did you mean 'pi5'" in r.stderr


def test_profiles_show_json_is_one_object(cli):
    r = cli("profiles", "show", "pi5", "--json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["ok"] and out["profile"]["name"] == "pi5" and out["missing_sources"] == []
    assert out["profile"]["sources"]["memory.bandwidth_gbps"]["kind"] == "derived"


# --------------------------------------------------------------------------- user profile directories


def _user_profile(tmp_path: Path, name: str, description: str) -> Path:
    data = _pi5_data()
    data["name"], data["description"] = name, description
    for key in ("family", "family_default", "aliases"):  # pi5's own names stay pi5's
        data.pop(key, None)
    d = tmp_path / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    _write(d, data, f"{name}.yaml")
    return d


def test_profile_dir_adds_a_user_profile(cli, tmp_path):
    d = _user_profile(tmp_path, "myboard", "my own board")
    r = cli("profiles", "list", "--profile-dir", str(d), "--json")
    rows = {row["name"]: row for row in json.loads(r.stdout)["profiles"]}
    assert rows["myboard"]["origin"] == str(d / "myboard.yaml")
    assert rows["pi5"]["origin"] == "builtin"
    r = cli("profiles", "show", "myboard", "--profile-dir", str(d), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["profile"]["description"] == "my own board"


def test_env_path_adds_a_user_profile_and_user_dirs_win_over_builtins(cli, tmp_path):
    d = _user_profile(tmp_path, "pi5", "my tuned pi5")
    env = {"EDGEOPT_PROFILE_PATH": str(d)}
    r = cli("profiles", "show", "pi5", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["profile"]["description"] == "my tuned pi5"
    assert load_profile("pi5").description != "my tuned pi5"  # built-in untouched without the env


def test_profile_dir_wins_over_env_path(tmp_path, monkeypatch):
    env_dir = _user_profile(tmp_path / "a", "board", "from env")
    flag_dir = _user_profile(tmp_path / "b", "board", "from flag")
    monkeypatch.setenv("EDGEOPT_PROFILE_PATH", str(env_dir))
    assert load_profile("board").description == "from env"
    assert load_profile("board", [flag_dir]).description == "from flag"


def test_missing_profile_dir_and_misnamed_file_are_errors(tmp_path):
    with pytest.raises(BadProfileError, match="not found"):
        load_profile("pi5", [tmp_path / "nope"])
    d = _user_profile(tmp_path, "alpha", "x")
    os.replace(d / "alpha.yaml", d / "beta.yaml")
    with pytest.raises(BadProfileError, match="declares name 'alpha'"):
        load_profile("beta", [d])


# --------------------------------------------------------------------------- host


def _proc_cpuinfo_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux /proc/cpuinfo")
def test_host_profile_matches_this_machine():
    from edgeopt.host import ISA_OF_INTEREST

    p = load_profile("host")
    assert p.detected and p.name == "host"
    cpu = p.unit(UnitKind.CPU)
    assert cpu.cores == len(os.sched_getaffinity(0))
    assert set(cpu.isa) == _proc_cpuinfo_flags() & set(ISA_OF_INTEREST)
    assert p.memory.bandwidth_gbps > 0
    assert p.source_for("memory.bandwidth_gbps").kind == SourceKind.MEASURED
    assert p.source_for("compute_units.cpu.peak_gops.fp32").kind == SourceKind.ESTIMATE
    assert p.missing_sources() == []


# --------------------------------------------------------------------------- families and aliases (the names users type)


def test_aliases_resolve_silently_to_their_profile(capsys):
    for alias, name in [("rpi5", "pi5"), ("raspberrypi5", "pi5"), ("orin-nano", "jetson-orin-nano"),
                        ("core-ultra", "intel-npu"), ("meteor-lake", "intel-npu"), ("agx-orin", "jetson-agx-orin")]:
        assert load_profile(alias).name == name
    assert capsys.readouterr().err == ""


def test_a_family_picks_its_documented_default_and_says_how_to_pick_another(capsys):
    profile, choice = resolve_profile("jetson-orin")
    assert profile.name == "jetson-orin-nano" and choice.via == "family"
    assert choice.members == ("jetson-agx-orin", "jetson-orin-nano")
    assert "default member 'jetson-orin-nano'" in choice.note and "--profile jetson-agx-orin" in choice.note
    assert load_profile("raspberry-pi").name == "pi5"
    assert "'raspberry-pi' is a profile family" in capsys.readouterr().err


def test_every_shipped_family_has_exactly_one_default():
    families = {c.requested: c for c in profile_index().values() if c.via == "family"}
    assert set(families) == {"jetson-orin", "raspberry-pi"}
    for fam, c in families.items():
        assert c.name in c.members and load_profile(c.name).family_default, fam


def test_convert_with_a_family_name_works_as_the_readme_shows(cli, tmp_path):
    """`edgeopt convert model.onnx --profile jetson-orin`, exactly: the default member, said on stderr
    and recorded in the manifest beside what was typed."""
    from fixtures_remote import make_tiny_onnx

    make_tiny_onnx(tmp_path / "model.onnx")
    r = cli("convert", "model.onnx", "--profile", "jetson-orin", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'jetson-orin' is a profile family: using its default member 'jetson-orin-nano'" in r.stderr
    assert "--profile jetson-agx-orin" in r.stderr
    manifest = json.loads((tmp_path / "model-jetson-orin" / "manifest.json").read_text())
    assert manifest["profile"] == "jetson-orin-nano" and manifest["profile_requested"] == "jetson-orin"
    assert any("profile family" in w for w in manifest["warnings"])


def test_profiles_list_shows_families_and_aliases(cli):
    r = cli("profiles", "list", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["families"]["jetson-orin"] == {"default": "jetson-orin-nano",
                                              "members": ["jetson-agx-orin", "jetson-orin-nano"]}
    assert out["aliases"]["rpi5"] == "pi5" and out["aliases"]["meteor-lake"] == "intel-npu"
    rows = {row["name"]: row for row in out["profiles"]}
    assert rows["pi5"]["family"] == "raspberry-pi" and rows["pi5"]["family_default"]
    assert "raspberrypi5" in rows["pi5"]["aliases"]
    text = cli("profiles", "list")
    assert text.returncode == 0
    assert "family jetson-orin: jetson-agx-orin, jetson-orin-nano; '--profile jetson-orin' means jetson-orin-nano" \
        in text.stdout
    assert "raspberrypi5" in text.stdout


def _declaring(tmp_path: Path, name: str, **names) -> Path:
    d = _user_profile(tmp_path, name, f"{name} board")
    data = yaml.safe_load((d / f"{name}.yaml").read_text())
    data.update(names)
    _write(d, data, f"{name}.yaml")
    return d


def test_a_users_profile_declares_its_own_family_and_aliases(cli, tmp_path):
    d = _declaring(tmp_path, "lab-pi5-oc", family="lab-boards", family_default=True, aliases=["oc-pi"])
    _declaring(tmp_path, "lab-rk3588", family="lab-boards", aliases=["rock5"])
    assert load_profile("oc-pi", [d]).name == "lab-pi5-oc"
    assert load_profile("rock5", [d]).name == "lab-rk3588"
    profile, choice = resolve_profile("lab-boards", [d])
    assert profile.name == "lab-pi5-oc" and choice.members == ("lab-pi5-oc", "lab-rk3588")
    r = cli("profiles", "list", "--profile-dir", str(d), "--json")
    assert json.loads(r.stdout)["families"]["lab-boards"]["default"] == "lab-pi5-oc"


def test_an_alias_naming_two_profiles_is_a_clear_error(cli, tmp_path):
    d = _declaring(tmp_path, "my-pi", aliases=["rpi5"])  # the built-in pi5 has it already
    r = cli("profiles", "show", "rpi5", "--profile-dir", str(d))
    assert r.returncode == 3
    assert "the profile name 'rpi5' is claimed twice: alias of my-pi (" in r.stderr
    assert "and alias of pi5 (device_profiles/pi5.yaml)" in r.stderr and "remove it from one of them" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("profiles", "list", "--profile-dir", str(d), "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["error"]["kind"] == "bad_profile"


@pytest.mark.parametrize(("name", "names", "words"), [
    ("my-pi", {"aliases": ["rpi5"]}, ["'rpi5' is claimed twice", "my-pi.yaml", "device_profiles/pi5.yaml"]),
    ("my-pi", {"aliases": ["pi5"]}, ["'pi5' is claimed twice", "my-pi.yaml", "device_profiles/pi5.yaml"]),
    ("rpi5", {}, ["'rpi5' is claimed twice", "rpi5.yaml", "device_profiles/pi5.yaml"]),
    ("my-pi", {"family": "pi5"}, ["'pi5' is claimed twice", "my-pi.yaml", "device_profiles/pi5.yaml"]),
])
def test_a_user_profile_claiming_a_builtins_name_fails_when_loaded_by_its_own_name(cli, tmp_path, name, names,
                                                                                  words):
    d = _declaring(tmp_path, name, **names)
    with pytest.raises(BadProfileError) as err:
        load_profile(name, [d])  # not only when someone types the contested name
    assert all(w in err.value.message for w in words), err.value.message
    r = cli("convert", "m.onnx", "--profile", name, "--profile-dir", str(d), "--dry-run", "--json")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert json.loads(r.stdout)["error"]["kind"] == "bad_profile"
    by_path = cli("profiles", "show", str(d / f"{name}.yaml"))
    assert by_path.returncode == 3 or not names, by_path.stderr  # a file named rpi5.yaml by path replaces nothing


def test_two_user_profiles_claiming_one_alias_fail_naming_both_files(tmp_path):
    d = _declaring(tmp_path, "lab-a", aliases=["bench-board"])
    _declaring(tmp_path, "lab-b", aliases=["bench-board"])
    with pytest.raises(BadProfileError, match=r"'bench-board' is claimed twice: .*lab-a.yaml.* and .*lab-b.yaml"):
        load_profile("lab-a", [d])


def test_a_family_without_a_default_asks_for_a_member(tmp_path):
    d = _declaring(tmp_path, "board-a", family="boards")
    _declaring(tmp_path, "board-b", family="boards")
    with pytest.raises(BadProfileError, match="family 'boards' has no default member") as err:
        load_profile("boards", [d])
    assert "board-a, board-b" in err.value.hint
    d2 = _declaring(tmp_path / "two", "c1", family="twins", family_default=True)
    _declaring(tmp_path / "two", "c2", family="twins", family_default=True)
    with pytest.raises(BadProfileError, match="2 default members"):
        load_profile("twins", [d2])


def test_alias_and_family_must_be_names_and_differ_from_the_profile():
    data = _pi5_data()
    with pytest.raises(BadProfileError, match="aliases"):
        parse_profile({**data, "aliases": ["Bad Name"]}, "t")
    with pytest.raises(BadProfileError, match="differ"):
        parse_profile({**data, "aliases": ["pi5"]}, "t")
    with pytest.raises(BadProfileError, match="unknown key 'alias'"):
        parse_profile({**data, "alias": ["x"]}, "t")


def test_remote_bench_of_a_profile_name_points_at_the_running_emulator(cli, remote_env):
    """`edgeopt remote-bench pi5 ...` with no device pi5, while `emulate start pi5` has added pi5-emu
    to the inventory (the entry is what a running emulator leaves; nothing is started here)."""
    from edgeopt.remote.inventory import add_device, make_device

    add_device(make_device(name="pi5-emu", host="127.0.0.1", port=2222, profile="pi5", emulated=True))
    for typed in ("pi5", "rpi5"):
        r = cli("remote-bench", typed, "model.onnx")
        assert r.returncode == 3  # bad input, like an unknown profile
        assert f"unknown device '{typed}'" in r.stderr
        assert "the emulated" in r.stderr and "runs as pi5-emu" in r.stderr
        assert "edgeopt remote-bench pi5-emu ARTIFACT" in r.stderr
