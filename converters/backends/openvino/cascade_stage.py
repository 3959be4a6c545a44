"""One early-exit stage in OpenVINO, for the cascade's ``load.py`` (its text is appended there: standard library,
numpy and openvino only)."""

import os


def open_backend_stage(folder, runtime):
    """A function feeds -> outputs (dicts by ONNX name) for the stage whose files are in ``folder``."""
    import openvino as ov

    compiled = ov.Core().compile_model(os.path.join(folder, runtime["model"]), "CPU")
    outs = {o["name"]: o["runtime_name"] for o in runtime["io"]["outputs"]}
    ins = {i["name"]: i["runtime_name"] for i in runtime["io"]["inputs"]}

    def run(feeds):
        result = compiled({ins[k]: v for k, v in feeds.items()})
        return {name: result[compiled.output(rt)] for name, rt in outs.items()}
    return run
