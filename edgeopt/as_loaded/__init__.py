"""The graph as the runtime loads it: after the runtime's own optimizations (ONNX Runtime's optimized model,
OpenVINO's compiled runtime model), summarised: op types, Q/DQ by dtype, precisions, nodes per provider. Each
backend that has such a view gives it through its hooks (``as_loaded_suffix``, ``as_loaded``, ``as_loaded_lines``)."""

from __future__ import annotations

from pathlib import Path


def _hooks(backend: str):
    from edgeopt.converters.registry import hooks_of

    return hooks_of(backend)


def _readable() -> list[str]:
    from edgeopt.converters.registry import backend_hooks

    return [b.value for b, h in backend_hooks().items() if h.as_loaded_suffix]


def default_output(artifact_dir: str | Path, backend: str) -> Path:
    """Where the as-loaded graph is written by default: beside the artifact directory (the artifact itself is left
    as its manifest lists it)."""
    d = Path(artifact_dir).resolve()
    return d.parent / f"{d.name}{_hooks(backend).as_loaded_suffix}"


def as_loaded(artifact_dir: str | Path, manifest: dict, out_path: str | Path | None = None) -> dict:
    """The artifact's graph after its runtime's own optimizations, written to ``out_path`` (default: beside the
    artifact), and its summary."""
    from edgeopt.errors import UsageError

    backend = manifest["backend"]
    readable = _readable()
    if backend not in readable:
        raise UsageError(f"--as-loaded reads {' and '.join(readable)} artifacts, not {backend}",
                         f"inspect an artifact written with --backend {' or '.join(readable)}")
    out = Path(out_path) if out_path else default_output(artifact_dir, backend)
    return _hooks(backend).as_loaded(Path(artifact_dir), manifest, out)


def as_loaded_text(facts: dict) -> list[str]:
    """The summary in a few lines."""
    lines = [f"as loaded ({facts['graph']}): {facts['nodes']} nodes" +
             (f", written to {facts['written']}" if facts.get("written") else "")]
    lines.append("  op types: " + ", ".join(f"{k} {v}" for k, v in facts["op_types"].items()))
    return lines + _hooks(facts["runtime"]).as_loaded_lines(facts)
