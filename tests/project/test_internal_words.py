"""The product speaks to users: no words from how it was built (numbered work items, work branches, worktree paths)
in any tracked file's name or text, results and tests included."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = re.compile(r"(?i)\b(?:stop|issue|session)\s?#?\d{1,3}\b|\bround \d\b|stop\d{2}|before-stop|/wt-[a-z0-9]+/")
BINARY = (".onnx", ".npz", ".png", ".jpg", ".bin", ".tflite", ".xml", ".so", ".wav", ".pdf")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.split() if out.returncode == 0 else []


def test_the_pattern_finds_what_it_is_meant_to_find():
    # the examples are joined from parts so that this file does not itself hold the words it looks for
    for parts in (("rerun of ", "stop", " 32"), ("Iss", "ue 26: x"), ("device_matrix-", "stop", "34.json"),
                  ("/work/", "wt-", "qmodes/fixtures"), ("(", "issue", " 23.5)"), ("round", " 2")):
        assert WORDS.search("".join(parts)), parts
    for text in ("the search stops at 3 candidates", "exit code 5", "an issue with the scale", "round-trip",
                 "round8(x)"):
        assert not WORDS.search(text), text


def test_no_internal_words_in_tracked_names_or_text():
    files = _tracked()
    if not files:
        import pytest

        pytest.skip("not a git checkout: nothing tracked to read")
    found = []
    for name in files:
        if WORDS.search(name):
            found.append(f"{name}: file name")
        if name.endswith(BINARY) or name == Path(__file__).relative_to(ROOT).as_posix():
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for m in WORDS.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{name}:{line}: {m.group(0)!r}")
    assert not found, "internal words in the product:\n" + "\n".join(found[:40])
