"""The consumer-parity tables of docs/benchmarks/consumers.md (``bench/consumer_parity.py``'s JSON): edgeopt's runner
beside the runtime's plain API, and LiteRT's load.cc in TensorFlow Lite's C++ API."""

from __future__ import annotations

from docs_renderers import BACKEND_NAMES


def _diff(part: dict | None) -> str:
    if not part:
        return "-"
    top1 = f", top-1 {part['top1']:g} %" if part.get("top1") is not None else ""
    return f"{part['max_abs_diff']:.3g}{top1}"


def _cc(row: dict) -> str:
    cc = row.get("load_cc")
    if not cc:
        return "-"
    if cc.get("skipped"):
        return f"not run: {cc['skipped']}"
    def one(part: dict) -> str:
        return f"fails: {part['failed']}" if "failed" in part else f"{part['max_abs_diff']:.3g}"

    return (f"x86_64 {one(cc['x86_64'])}, aarch64 {one(cc['aarch64 (qemu-user)'])} "
            f"({cc['samples']} samples, TensorFlow Lite {cc['tensorflow_lite']})")


def consumer_parity(docs: list[tuple[str, dict]]) -> str:
    """Per profile x model: the max |difference| from edgeopt's runner of load.py, load.py --bare and load.cc."""
    rows = ["| profile | model | written | runner top-1 | load.py: max diff | load.py --bare: max diff | "
            "plain default judged | load.cc (C++): max diff |", "|---|---|---|---|---|---|---|---|"]
    data_lines: dict[str, str] = {}
    for _, data in docs:
        for r in data["rows"]:
            data_lines[r["model"]] = r.get("data", "")
            if r.get("error"):
                rows.append(f"| {r['profile']} | {r['model']} | exit {r['exit_code']}: {r['error'][:80]} | | | | | |")
                continue
            runner = r["runner"].get("top1")
            plain = (r.get("consumer_check") or {}).get("plain_default")
            rows.append(f"| {r['profile']} | {r['model']} | {BACKEND_NAMES.get(r['backend'], r['backend'])} "
                        f"{r['precision']} | {'-' if runner is None else f'{runner:g} %'} | {_diff(r.get('load_py'))} | "
                        f"{_diff(r.get('bare'))} | {'yes' if plain else '-'} | {_cc(r)} |")
    said = "\n".join(f"- **{k}**: {v}" for k, v in data_lines.items())
    return "\n".join(rows) + "\n\nData per model:\n\n" + said
