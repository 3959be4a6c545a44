# TVM: the compiled library loaded with tvm.runtime.load_module and run in the Relax VirtualMachine; the target,
# its schedules and the weights are inside the library; the thread count is the runtime's (TVM_NUM_THREADS).
import os

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "model.so"  # filled in from the manifest
SETTINGS: dict = {}  # the manifest's runtime.settings (filled in)
IO: dict = {}  # the manifest's runtime.io (filled in)


def load(model_dir=None, *, bare=False):
    """A function running the model on numpy arrays keyed by the ONNX input names; ``bare``: no thread count.
    A library built for another machine (an aarch64 board) loads only there."""
    if SETTINGS.get("threads") and not bare:
        os.environ.setdefault("TVM_NUM_THREADS", str(int(SETTINGS["threads"])))
    os.environ.setdefault("TVM_BIND_THREADS", "0")  # a single-threaded pool would pin the caller to one core
    import tvm
    from tvm.runtime.vm import VirtualMachine

    device = tvm.cpu(0) if SETTINGS.get("device", "cpu") == "cpu" else tvm.device(SETTINGS["device"], 0)
    library = tvm.runtime.load_module(os.path.join(model_dir or HERE, MODEL))
    main = VirtualMachine(library, device)["main"]
    names = [io["name"] for io in IO.get("inputs", [])]
    out_names = [io["name"] for io in IO.get("outputs", [])]

    def run(feeds: dict) -> dict:
        result = main(*[tvm.runtime.tensor(contiguous(feeds[n]), device) for n in names])  # noqa: F821
        tensors = [result] if hasattr(result, "numpy") else list(result)
        return {n: t.numpy() for n, t in zip(out_names, tensors, strict=True)}

    run.applied = {"TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"), "device": str(device), "bare": bare}
    run.settings = {} if bare else SETTINGS  # the settings this load applied
    return run
