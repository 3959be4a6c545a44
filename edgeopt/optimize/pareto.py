"""The Pareto front of candidates (latency down, accuracy up) and the text of the waterfall/front."""

from __future__ import annotations


def pareto_front(points: list[dict], *, latency: str = "p50_ms", accuracy: str = "accuracy") -> list[dict]:
    """Points no other point beats on both latency (lower) and accuracy (higher), fastest first.

    Points without both figures are left out. Ties on both figures keep the first.
    """
    usable = [p for p in points if p.get(latency) is not None and p.get(accuracy) is not None]
    front: list[dict] = []
    for p in sorted(usable, key=lambda q: (q[latency], -q[accuracy])):
        if not front or p[accuracy] > front[-1][accuracy]:
            front.append(p)
    return front


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _why(r: dict) -> str:
    why = r.get("why") or (f"failed to build: {r['error']}" if r.get("error") else "")
    return f"  {why[:100]}" if why else ""


def waterfall_text(rows: list[dict]) -> str:
    lines = [f"{'step':10} {'configuration':40} {'p50 ms':>9} {'vs start':>9} {'accuracy':>9} {'drop':>6}"]
    base = rows[0].get("p50_ms") if rows else None
    for r in rows:
        speed = f"{base / r['p50_ms']:.2f}x" if base and r.get("p50_ms") else "-"
        lines.append(f"{r['step']:10} {r['label'][:40]:40} {_fmt(r.get('p50_ms'), '.4f'):>9} {speed:>9} "
                     f"{_fmt(r.get('accuracy'), '.2f'):>9} {_fmt(r.get('accuracy_drop'), '.2f'):>6}"
                     + ("" if r.get("kept", True) else "  (not kept)") + _why(r))
    return "\n".join(lines)


def pareto_text(front: list[dict], winner: str | None) -> str:
    lines = [f"{'':2}{'candidate':40} {'p50 ms':>9} {'accuracy':>9}"]
    for p in front:
        mark = "* " if p["label"] == winner else "  "
        lines.append(f"{mark}{p['label'][:40]:40} {_fmt(p.get('p50_ms'), '.4f'):>9} {_fmt(p.get('accuracy'), '.2f'):>9}")
    return "\n".join(lines)
