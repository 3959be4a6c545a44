"""The firmware walk-through's console blocks and header excerpts, rendered from the JSON of
``bench/firmware_walkthrough.py`` (``bench/docs_tables.py`` puts them into docs/guide/firmware-microcontrollers.md).
Each renderer takes ``[(path, data)]`` and shows the commands and the lines they printed, as run."""
from __future__ import annotations

import re

# The printed lines each block shows, by how they start; the rest (the analysis tables, the plan's stage list,
# the consumer check's details) is elided as "...".
ANALYZE_SHOWN = ("memory (estimate", "roofline chart")
CONVERT_SHOWN = ("plan ", "wrote ", "validation ", "units ", "metric ", "memory (estimate", "tflite-micro:", "arena:",
                 "firmware (")
INT8_IO_SHOWN = ("tflite-micro:", "arena:", "firmware (")
# The header's defines each excerpt shows.
FLOAT_DEFINES = ("ARENA_BYTES", "INPUT0_SHAPE", "INPUT0_TYPE", "INPUT0_SCALE", "INPUT0_ZERO_POINT", "OUTPUT0_SHAPE")
INT8_DEFINES = ("ARENA_BYTES", "INPUT0_TYPE", "INPUT0_SCALE", "INPUT0_ZERO_POINT", "OUTPUT0_SCALE",
                "OUTPUT0_ZERO_POINT")
COMMENTS = {"INPUT0_SHAPE": "/* NHWC, as TFLM sees it */",
            "INPUT0_SCALE": "/* float32 io: quantize/dequantize run inside the model */"}


def _console(run: dict, shown: tuple[str, ...]) -> str:
    lines, elided = [f"$ {run['command']}"], False
    for ln in run["lines"]:
        if ln.startswith(shown):
            lines.append(ln)
            elided = False
        elif not elided:
            lines.append("...")
            elided = True
    return "```console\n" + "\n".join(lines) + "\n```"


def _defines(header: str, names: tuple[str, ...], comments: bool) -> str:
    found = dict(re.findall(r"^#define EDGEOPT_(\w+) (.*)$", header, re.M))
    out = []
    for n in names:
        line = f"#define EDGEOPT_{n} {found[n]}"
        note = COMMENTS.get(n) if comments else None
        out.append(f"{line:<45}{note}" if note else line)
    return "```c\n" + "\n".join(out) + "\n```"


def firmware_analyze(docs: list[tuple[str, dict]]) -> str:
    """``edgeopt analyze`` for the profile: its command and its memory prediction line."""
    return _console(docs[0][1]["commands"]["analyze"], ANALYZE_SHOWN)


def firmware_convert(docs: list[tuple[str, dict]]) -> str:
    """The conversion with float io: its command, the lines it printed, and how long it took."""
    data = docs[0][1]
    run = data["commands"]["convert"]
    fw = data["builds"]["convert"]["firmware"]
    return (f"{_console(run, CONVERT_SHOWN)}\n\nThe conversion took {run['seconds']:.0f} s here (2 shared cores); "
            f"the firmware was compiled with `{fw['compiler']}`.")


def firmware_header(docs: list[tuple[str, dict]]) -> str:
    """The float io build's header defines."""
    return _defines(docs[0][1]["builds"]["convert"]["header"], FLOAT_DEFINES, comments=True)


def firmware_int8_io(docs: list[tuple[str, dict]]) -> str:
    """The int8 io build: its command, its TFLM and firmware lines, and the quantization its header gives."""
    data = docs[0][1]
    return (f"{_console(data['commands']['convert_int8_io'], INT8_IO_SHOWN)}\n\n"
            f"{_defines(data['builds']['convert_int8_io']['header'], INT8_DEFINES, comments=False)}")


def firmware_figures(docs: list[tuple[str, dict]]) -> str:
    """The walk-through's figures in words: the predicted arena against TFLM's plan, TFLM's own allocations
    predicted and reported, and the share of the budget the arena takes."""
    b = docs[0][1]["builds"]["convert"]
    alloc, pred = b["arena"]["allocations"], b["predicted"]
    exact = "exactly" if pred["arena_bytes"] == alloc["head_bytes"] else "not exactly"
    return (f"For this model the predicted arena ({pred['arena_bytes']:,} bytes) is {exact} what TFLM's planner "
            f"lays out for the converted model ({alloc['head_bytes']:,} bytes). TFLM's recording allocator reports "
            f"{alloc['tail_bytes']:,} bytes of its own allocations against {pred['runtime_bytes']:,} predicted; "
            f"the arena the run needs, {b['arena']['arena_bytes']:,} bytes, is "
            f"{100 * b['arena']['arena_bytes'] / b['budget_bytes']:.1f} % of the profile's budget "
            f"({b['budget_bytes']:,} bytes).")


def _folder(run: dict) -> str:
    """The output folder a command names (``-o``)."""
    return run["command"].rsplit("-o ", 1)[1]


def _gate_first(run: dict) -> dict:
    """The run with the gate's line first: the gate runs before any work (the JSON keeps stdout, then stderr)."""
    rest = [ln for ln in run["lines"] if ln != run["gate_line"]]
    return {**run, "lines": [run["gate_line"], *rest]}


GATE_SHOWN = ("edgeopt: error: memory:", "warning: memory:", "wrote ", "memory (estimate", "tflite-micro:", "arena:")


def firmware_gate(docs: list[tuple[str, dict]]) -> str:
    """The memory gate as run: a budget the model does not fit (its exit code, its line, nothing written) and FP32
    asked for under a budget only INT8 fits (the warning naming what was built, and what the manifest records)."""
    refuse, adapt = (_gate_first(docs[0][1]["commands"][k]) for k in ("refuse", "adapt"))
    written = "was written" if refuse["written"] else "does not exist afterwards: nothing was written"
    chosen = adapt.get("adapted") or {}
    return (f"{_console(refuse, GATE_SHOWN)}\n\nIt exits with code {refuse['returncode']} before any work, and "
            f"`{_folder(refuse)}` {written}. With FP32 asked for under a budget that only INT8 fits:\n\n"
            f"{_console(adapt, GATE_SHOWN)}\n\nIt exits with code {adapt['returncode']}, and "
            f"`{_folder(adapt)}/manifest.json` records under `memory.adapted` what was asked for "
            f"({chosen.get('requested')}, {chosen.get('requested_bytes'):,} bytes predicted) and what was built "
            f"({chosen.get('chosen')}).")
