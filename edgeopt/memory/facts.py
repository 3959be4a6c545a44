"""Each runtime's base memory cost and the copies of the weights it holds, measured once here and stored with
their source and date in the runtime's backend folder (``converters/backends/<name>/memory_facts.py``, reached
through its hooks' ``memory``); this module reads them.

``bytes``: peak RSS of a child process after importing the runtime, loading the 8x8 digits CNN (25k
parameters) and running it, minus RSS before the import, minus that model's predicted weights and arena and,
for ONNX Runtime, its copies of them. The digits rows of ``bench/memory_fit.py`` re-measure it; the figures
here are from its run in bench/results/2026-12-04/memory_fit.json (a run earlier that day on the same machine,
busier, read 6 MB more for ONNX Runtime and 4 MB more for OpenVINO: the base moves with the machine's state).
TFLite Micro's figure is its own allocator's persistent allocations besides the arena plan (interpreter,
tensor and node structs), read from its recording allocator, per tensor and per node (digits CNN INT8: tail
4304 bytes = 504 for 21 eval tensors, 128 for the io tensors, 576 node structs and 2392 kernel buffers for 9
ops).
"""

from __future__ import annotations

MEASURED_ON = "AMD EPYC (AVX-512 VNNI/BF16), Linux x86_64, Python 3.11"


def facts_of(runtime: str, micro: bool = False) -> dict | None:
    """The memory facts ``runtime``'s backend states (its hooks' ``memory``; ``micro``: TFLite Micro's, which the
    LiteRT backend states); None for a runtime with none."""
    from edgeopt.converters.registry import hooks_of
    from edgeopt.errors import EdgeoptError

    try:
        facts = hooks_of(runtime).memory or {}
    except (KeyError, ValueError, EdgeoptError):
        return None
    return facts.get("micro") if micro else (facts or None)


def weight_copies(runtime: str, *, micro: bool = False, stored: int = 0, kept: int = 0, conv: int = 0,
                  arena: int = 0, int8: bool = False) -> int:
    """Bytes of the copies of the weights (and of the activation arena) ``runtime`` holds at its peak (0 for a
    runtime with no measured share); an INT8 artifact adds its ``int8_copies`` shares."""
    fact = facts_of(runtime, micro) or {}
    c = dict(fact.get("copies") or {})
    for k, v in (fact.get("int8_copies") or {}).items() if int8 else ():
        c[k] = c.get(k, 0) + v
    return int(c.get("stored", 0) * stored + c.get("kept", 0) * kept + c.get("conv", 0) * conv
               + c.get("arena", 0) * arena)


def arena_region(runtime: str, arena: int, micro: bool = False) -> int:
    """The arena region ``runtime`` holds a block of ``arena`` bytes in: the block itself within the first region
    (counted in the base), else the next power-of-two multiple of it (a runtime without regions: ``arena``)."""
    first = (facts_of(runtime, micro) or {}).get("arena_first_region_bytes")
    if not first or arena <= first:
        return arena
    region = first
    while region < arena:
        region *= 2
    return region


def int8_ops(runtime: str, micro: bool = False) -> frozenset[str] | None:
    """The ONNX op types ``runtime`` runs in INT8 in a static INT8 artifact (reading and writing INT8 activations);
    None where it states none (every op of its INT8 artifacts is)."""
    ops = (facts_of(runtime, micro) or {}).get("int8_ops")
    return None if ops is None else frozenset(ops)


def activations_at_precision(runtime: str, micro: bool = False) -> bool:
    """Whether ``runtime`` holds a float artifact's activations at the artifact's precision (a float16 model's at
    2 bytes: ``activations_at_precision`` in its facts); else at 4 bytes whatever the weights' precision."""
    return bool((facts_of(runtime, micro) or {}).get("activations_at_precision"))


def identical_constants_once(runtime: str, micro: bool = False) -> bool:
    """Whether ``runtime`` holds identical constants once (OpenVINO: its IR stores each distinct blob once)."""
    return bool((facts_of(runtime, micro) or {}).get("identical_constants_once"))


def runtime_base(runtime: str, *, micro: bool = False, tensors: int = 0, nodes: int = 0,
                 int8: bool = False) -> tuple[int, str]:
    """(bytes, where the figure comes from) for ``runtime``: its base, its cost per tensor and per op, and, for an
    INT8 artifact, what loading its INT8 kernels adds (``int8_bytes``) and what its INT8 graph adds per op
    (``int8_per_node_bytes``); an unknown runtime counts 0 and says so."""
    fact = facts_of(runtime, micro)
    if fact is None:
        return 0, f"{runtime}: no measured base cost (counted as 0)"
    n = fact["bytes"] + fact.get("per_tensor_bytes", 0) * tensors + fact.get("per_node_bytes", 0) * nodes
    n += fact.get("int8_bytes", 0) + fact.get("int8_per_node_bytes", 0) * nodes if int8 else 0
    return int(n), f"measured {fact['date']}, {fact['version']}, {MEASURED_ON}"
