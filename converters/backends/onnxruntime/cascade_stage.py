"""One early-exit stage in ONNX Runtime, for the cascade's ``load.py`` (its text is appended there: standard
library, numpy and onnxruntime only)."""

import os


def open_backend_stage(folder, runtime):
    """A function feeds -> outputs (dicts by ONNX name) for the stage whose files are in ``folder``."""
    import onnxruntime as ort

    sess = ort.InferenceSession(os.path.join(folder, runtime["model"]), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return lambda feeds: dict(zip(names, sess.run(names, feeds), strict=True))
