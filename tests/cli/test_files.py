"""``edgeopt.files``: outputs appear complete or not at all."""

from __future__ import annotations

import stat

import pytest

from edgeopt.files import atomic_path, write_text_atomic


def test_success_renames_into_place_with_readable_mode_and_no_leftovers(tmp_path):
    out = write_text_atomic(tmp_path / "sub" / "report.html", "<html></html>")
    assert out.read_text() == "<html></html>"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "devices.toml"
    out.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["devices.toml"]


def test_temporary_keeps_the_suffix_and_mode_none_keeps_the_writers_mode(tmp_path):
    out = tmp_path / "model.so"
    with atomic_path(out, mode=None) as tmp:
        assert tmp.suffix == ".so" and tmp.parent == tmp_path
        tmp.write_bytes(b"\x7fELF")
        tmp.chmod(0o755)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
