"""One-line texts about an artifact that both ``convert`` and ``inspect`` print (one wording each)."""

from __future__ import annotations


def checked_on_text(on: dict) -> str:
    """Where the validation ran: the artifact's own provider, or which one instead and why."""
    where = on["provider"] if on["provider"] == on["target"] else (
        f"{on['provider']}, not the artifact's {on['target']}" + (f": {on['why']}" if on.get("why") else ""))
    return f"checked on {where}"


def precision_fallback_text(precision: str, fallback: dict) -> str:
    """Why the artifact is not the precision asked for (``convert``'s float fallback)."""
    return (f"{precision.upper()}, not {fallback['requested'].upper()}: no INT8 held the bound "
            f"({fallback['reason']})")
