"""``load.cc``: the artifact's model loaded in C++ with the settings edgeopt judged it at (the runtime's C++ API).

Each backend writes its own (its hooks' ``load_cc``, in its folder's ``consumer.py``); every one runs the model on
raw input files and prints its outputs (:mod:`.cc_io`).
"""

from __future__ import annotations


def cc_source(manifest: dict, hooks) -> str:
    """The text of ``load.cc`` for ``manifest`` (manifest.json's content), the body from the backend's ``hooks``."""
    runtime = manifest["runtime"]
    return _head(manifest) + hooks.load_cc(runtime, manifest)


def _head(manifest: dict) -> str:
    runtime = manifest["runtime"]
    return (f"// Load {runtime['model']} with the settings edgeopt judged it at ({runtime['backend']}, "
            f"{manifest.get('precision')}, profile {manifest.get('profile')}); generated from manifest.json.\n")
