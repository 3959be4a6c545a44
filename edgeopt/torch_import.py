"""``--from-torch package.module:factory --weights FILE``: export a PyTorch model to ONNX (opset 17)."""

from __future__ import annotations

import importlib
from pathlib import Path

from edgeopt.errors import BadModelError, UsageError

OPSET = 17


def _factory(spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--from-torch '{spec}' is not package.module:factory", "e.g. --from-torch fixtures.crepe:tiny")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UsageError(f"--from-torch: cannot import '{module_name}' ({err})", "is the package on PYTHONPATH?") from err
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise UsageError(f"--from-torch: '{module_name}' has no callable '{attr}'", "name the function that builds the model")
    return fn


def export_from_torch(spec: str, weights: str | Path | None, input_shapes: dict[str, tuple[int, ...]], out: Path) -> Path:
    """Build the model with the factory, load ``weights`` (a state dict), export to ``out``."""
    from edgeopt.deps import require

    torch = require("torch", "--from-torch")
    if not input_shapes:
        raise UsageError("--from-torch needs --input-shape NAME=DIMS for each input", "e.g. --input-shape input=1x1024")
    model = _factory(spec)()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--from-torch: '{spec}' returned {type(model).__name__}, not a torch.nn.Module")
    if weights is not None:
        wp = Path(weights)
        if not wp.is_file():
            raise BadModelError(f"--weights '{wp}' not found", "check the path")
        try:
            state = torch.load(str(wp), map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - pickle/zip errors read the same to a user
            raise BadModelError(f"--weights '{wp}' is not a readable PyTorch state dict ({type(err).__name__})") from err
        if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
            state = state["state_dict"]
        try:
            model.load_state_dict(state)
        except (RuntimeError, TypeError) as err:
            first = str(err).strip().splitlines()
            raise BadModelError(f"--weights '{wp}' does not fit '{spec}': {first[1].strip() if len(first) > 1 else first[0]}",
                                "give the weights made for this model") from err
    model.eval()
    names = list(input_shapes)
    args = tuple(torch.zeros(*input_shapes[n]) for n in names)
    out.parent.mkdir(parents=True, exist_ok=True)
    import warnings

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notes (dynamo needs onnxscript)
            torch.onnx.export(model, args, str(out), input_names=names, opset_version=OPSET, dynamo=False,
                              do_constant_folding=True)
    except Exception as err:  # noqa: BLE001 - exporter errors are many and long
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise BadModelError(f"--from-torch: ONNX export of '{spec}' failed: {first}", "check the input shape") from err
    return out
