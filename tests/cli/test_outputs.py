"""``edgeopt.outputs.publish``: the one way a finished output takes its place (convert, pipeline run, optimize,
bench's cache): the old output stays until the new one is complete, and a failure midway puts it back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgeopt.errors import OutputExistsError
from edgeopt.outputs import publish


def _artifact(path: Path, tag: str) -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"edgeopt_version": "0.1.0", "tag": tag}))
    (path / "model.onnx").write_bytes(tag.encode())
    return path


def _tag(path: Path) -> str:
    return json.loads((path / "manifest.json").read_text())["tag"]


def test_publish_puts_a_new_output_in_place(tmp_path):
    new = _artifact(tmp_path / ".out.tmp-1", "new")
    assert publish(new, tmp_path / "out") == tmp_path / "out"
    assert _tag(tmp_path / "out") == "new" and not new.exists()


def test_forced_publish_replaces_the_old_output_and_leaves_nothing_beside_it(tmp_path):
    out = _artifact(tmp_path / "out", "old")
    publish(_artifact(tmp_path / ".out.tmp-1", "new"), out, force=True)
    assert _tag(out) == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_publish_that_fails_midway_leaves_the_old_output_intact(tmp_path, monkeypatch):
    out = _artifact(tmp_path / "out", "old")
    new = _artifact(tmp_path / ".out.tmp-1", "new")
    real_replace = os.replace

    def failing_replace(src, dst):  # the old output is set aside, then renaming the new one into place fails
        if Path(src) == new:
            raise OSError(28, "No space left on device", str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        publish(new, out, force=True)
    monkeypatch.undo()
    assert _tag(out) == "old" and (out / "model.onnx").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.tmp-1", "out"]  # nothing set aside is left


def test_publish_refuses_to_replace_without_force_or_what_is_not_an_edgeopt_output(tmp_path):
    out = _artifact(tmp_path / "out", "old")
    new = _artifact(tmp_path / ".out.tmp-1", "new")
    with pytest.raises(OutputExistsError):
        publish(new, out)
    assert _tag(out) == "old" and new.exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("not edgeopt's")  # appeared at the output while the run worked
    with pytest.raises(OutputExistsError):
        publish(new, mine, force=True)
    assert (mine / "thesis.tex").read_text() == "not edgeopt's"
