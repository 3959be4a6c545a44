"""A user's own metric: ``--metric my_pkg.metrics:score``.

The callable takes the list of output dicts (one ``{output name: array}`` per sample, in the data's order)
and the labels (``None`` without them) and returns a float, higher is better; if it also accepts a
``reference`` argument it gets FP32's outputs there. It may carry ``unit`` ("%" or "dB") as an attribute.
It is imported from the recipe's directory and the current directory first; a path that doesn't import or
name a callable is :class:`BadInputError` (exit 3), one line.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeopt.errors import BadInputError

HINT = "give MODULE:FUNCTION importable from the recipe's directory or the current directory, e.g. my_metrics:score"


@dataclass
class MetricClock:
    """Calls of one user metric in this process and the seconds they took: what a slow metric costs a run is
    reported (the search's and the validation's shares), and the search bounds its calls by ``--search-budget``."""

    calls: int = 0
    seconds: float = 0.0


CLOCKS: dict[str, MetricClock] = {}


def clock(path: str) -> MetricClock:
    """The clock of the user metric ``path`` (MODULE:FUNCTION), shared by every scorer of it in this process."""
    return CLOCKS.setdefault(str(path), MetricClock())


def mark() -> tuple[int, float]:
    """Every user metric's calls and seconds so far in this process: :func:`spent_since` takes it back."""
    return sum(c.calls for c in CLOCKS.values()), sum(c.seconds for c in CLOCKS.values())


def spent_since(m: tuple[int, float]) -> dict | None:
    """The user metrics' calls and seconds since :func:`mark` ``m``; None when none was called."""
    calls, seconds = mark()
    return None if calls == m[0] else {"calls": calls - m[0], "seconds": round(seconds - m[1], 3)}


def is_custom(name: str) -> bool:
    return ":" in str(name)


def _forget_stale(module_name: str, dirs: list[str]) -> None:
    """A module of that name imported earlier in this process from elsewhere (an API user's second run with
    another recipe directory) is dropped, so the file in the directories searched now is the one used."""
    cached = sys.modules.get(module_name)
    rel = Path(*module_name.split(".")).with_suffix(".py")
    here = next((Path(d) / rel for d in dirs if (Path(d) / rel).is_file()), None)
    if cached is not None and here is not None and Path(getattr(cached, "__file__", "") or "").resolve() != here.resolve():
        del sys.modules[module_name]


def load_callable(path: str, search_path=None) -> Callable:
    module_name, _, attr = str(path).partition(":")
    if not module_name or not attr or not all(p.isidentifier() for p in module_name.split(".")):
        raise BadInputError(f"--metric '{path}' is not MODULE:FUNCTION", HINT)
    dirs = [str(Path(p).resolve()) for p in (search_path or ())] + [str(Path.cwd())]
    added = [d for d in dirs if d not in sys.path]
    _forget_stale(module_name, dirs)
    sys.path[:0] = added
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise BadInputError(f"--metric '{path}': cannot import '{module_name}' ({err})", HINT) from err
    except Exception as err:  # noqa: BLE001 - the user's module failing at import is their input's fault
        raise BadInputError(f"--metric '{path}': importing '{module_name}' failed: {type(err).__name__}: {err}",
                            "fix the module (run it with python to see the traceback)") from err
    finally:
        for d in added:
            if d in sys.path:
                sys.path.remove(d)
    fn = getattr(module, attr, None)
    if fn is None:
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        from edgeopt.errors import did_you_mean

        raise BadInputError(f"--metric '{path}': '{module_name}' has no '{attr}'",
                            did_you_mean(attr, names) or f"its callables: {', '.join(names) or 'none'}")
    if not callable(fn):
        raise BadInputError(f"--metric '{path}': '{attr}' is not callable", HINT)
    return fn


def checked_value(value, path: str) -> float:
    """A user's metric must return one finite real number: an int, a float or a numpy scalar (or 0-d array)
    of those; not a bool, a string, None, an array of several values, NaN or infinity (exit 3 naming it)."""
    import math

    import numpy as np

    arr = value if isinstance(value, np.ndarray) else None
    if arr is not None and arr.ndim == 0:
        value = arr[()]
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if not real:
        raise BadInputError(f"--metric '{path}' returned {type(value).__name__} {shown}, not a real number",
                            "return one finite float (or int), higher is better")
    if not math.isfinite(float(value)):
        raise BadInputError(f"--metric '{path}' returned {shown}, not a finite number",
                            "return one finite float, higher is better; check it on your data: an empty class? 0/0?")
    return float(value)


def scorer(fn: Callable, path: str, labels, reference: list[dict] | None,
           role: str = "eval") -> Callable[[list[dict]], float]:
    """The one way a user's metric is called: ``fn(outputs, labels[, reference=])`` with the list of
    ``{output name: array}`` (one per sample, as the model gives it for one sample) and the labels of the data
    it is judged on (None when that data has none); its value checked by :func:`checked_value`."""
    try:
        takes_reference = "reference" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_reference = False

    timed = clock(path)

    def score(outputs: list[dict]) -> float:
        t0 = time.perf_counter()
        try:
            value = fn(outputs, labels, reference=reference) if takes_reference else fn(outputs, labels)
        except Exception as err:  # noqa: BLE001 - the user's metric failing is reported as their input
            no_labels = f" (labels=None: the {role} data it was judged on has no labels)" if labels is None else ""
            raise BadInputError(f"--metric '{path}' raised {type(err).__name__}: {err}{no_labels}",
                                "it is called as fn(outputs, labels): a list of {output: array}, one per sample, "
                                "and the labels (None without them: handle that, or give labelled data)") from err
        finally:
            timed.calls += 1
            timed.seconds += time.perf_counter() - t0
        return checked_value(value, path)

    return score
