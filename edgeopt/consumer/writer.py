"""Write ``load.py`` and ``load.cc`` beside an artifact's model, from its manifest's ``runtime`` entry.

``load.py`` is the runtime's part (its backend's template file, the hooks' ``load_py_template``), for a staged
early-exit artifact the cascade part (``templates/load_cascade.py``, which opens each stage with the runtime part's
``load``), and the shared command line (``templates/load_common.py``) joined, with the manifest's settings, io map and inputs written in as
Python literals: it imports numpy and the runtime only. ``load.cc`` (:mod:`.cc`) applies the same settings in C++.
"""

from __future__ import annotations

import pprint
import re
from pathlib import Path

from edgeopt.files import write_text_atomic

from .cc import cc_source
from .honours import hooks_for

TEMPLATES = Path(__file__).with_name("templates")
LOAD_PY, LOAD_CC = "load.py", "load.cc"
_FILLED = re.compile(r"^(MODEL|SETTINGS|IO|INPUTS)\b[^=]*= .*$")
_IMPORT = re.compile(r"^(import |from \S+ import )")


def literal(value) -> str:
    return pprint.pformat(value, width=100, sort_dicts=True)


def _parts(text: str) -> tuple[list[str], list[str], list[str]]:
    """(leading comment lines, top-level import lines, the rest) of one template."""
    lines = text.splitlines()
    comment = []
    while lines and lines[0].startswith("#"):
        comment.append(lines.pop(0))
    imports = [ln for ln in lines if _IMPORT.match(ln)]
    body = [ln for ln in lines if not _IMPORT.match(ln)]
    return comment, imports, body


def load_py_source(manifest: dict, version: str = "") -> str:
    """The text of ``load.py`` for ``manifest`` (a dict: manifest.json's content)."""
    runtime = manifest["runtime"]
    backend = runtime["backend"]
    comment, imports, body = _parts(hooks_for(backend).load_py_template().read_text())
    _, common_imports, common = _parts((TEMPLATES / "load_common.py").read_text())
    cascade = runtime.get("cascade")
    if cascade:  # a staged early-exit artifact: the backend's load() opens each stage, the cascade part runs them
        cascade_comment, cascade_imports, cascade_body = _parts((TEMPLATES / "load_cascade.py").read_text())
        comment, imports, body = [*comment, *cascade_comment], [*imports, *cascade_imports], [*body, "", *cascade_body]
    values = {"MODEL": runtime["model"], "SETTINGS": runtime.get("settings") or {}, "IO": runtime.get("io") or {},
              "INPUTS": [{"name": t["name"], "shape": t["shape"], "dtype": t["dtype"]} for t in manifest["inputs"]]}

    def fill(lines: list[str]) -> list[str]:
        out = []
        for ln in lines:
            m = _FILLED.match(ln)
            out.append(f"{m.group(1)} = {literal(values[m.group(1)])}" if m else ln.split("  # noqa")[0])
        return out

    what = f"the early-exit stages of {cascade}" if cascade else runtime["model"]
    head = [f'"""Load {what} as edgeopt {version} judged it: {backend}, {manifest.get("precision")}, '
            f'profile {manifest.get("profile")}.', "",
            "Generated from manifest.json's runtime.settings; needs numpy and the runtime only.",
            "    python load.py --inputs x.npz --outputs y.npz     (--bare: the runtime's defaults, for comparison)",
            "    from load import load; run = load(MODEL_DIR); outputs = run({INPUT_NAME: array})", '"""', ""]
    std = sorted({i for i in [*imports, *common_imports] if "numpy" not in i})
    text = [*head, *comment, *std, "", "import numpy as np", "", *fill(body), "", *fill(common)]
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(text)).rstrip() + "\n"


def write_loaders(artifact_dir: Path | str, manifest: dict, version: str = "") -> list[str]:
    """Write ``load.py`` and ``load.cc`` into ``artifact_dir`` (atomically); the file names written (none for a
    backend without templates, e.g. one registered from outside edgeopt)."""
    hooks = hooks_for(manifest["runtime"].get("backend"))
    template = hooks.load_py_template()
    if template is None or not template.is_file() or manifest["runtime"].get("runner"):
        return []
    d = Path(artifact_dir)
    write_text_atomic(d / LOAD_PY, load_py_source(manifest, version))
    if manifest["runtime"].get("cascade"):
        return [LOAD_PY]  # load.cc runs one model; a cascade's stages are run by load.py
    write_text_atomic(d / LOAD_CC, cc_source(manifest, hooks))
    return [LOAD_PY, LOAD_CC]
