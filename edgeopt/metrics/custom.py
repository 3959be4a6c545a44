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
from collections.abc import Callable
from pathlib import Path

from edgeopt.errors import BadInputError

HINT = "give MODULE:FUNCTION importable from the recipe's directory or the current directory, e.g. my_metrics:score"


def is_custom(name: str) -> bool:
    return ":" in str(name)


def load_callable(path: str, search_path=None) -> Callable:
    module_name, _, attr = str(path).partition(":")
    if not module_name or not attr or not all(p.isidentifier() for p in module_name.split(".")):
        raise BadInputError(f"--metric '{path}' is not MODULE:FUNCTION", HINT)
    dirs = [str(Path(p).resolve()) for p in (search_path or ())] + [str(Path.cwd())]
    added = [d for d in dirs if d not in sys.path]
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


def scorer(fn: Callable, path: str, labels, reference: list[dict] | None) -> Callable[[list[dict]], float]:
    try:
        takes_reference = "reference" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_reference = False

    def score(outputs: list[dict]) -> float:
        try:
            value = fn(outputs, labels, reference=reference) if takes_reference else fn(outputs, labels)
        except Exception as err:  # noqa: BLE001 - the user's metric failing is reported as their input
            raise BadInputError(f"--metric '{path}' raised {type(err).__name__}: {err}",
                                "it is called as fn(outputs, labels): a list of {output: array} and the labels") from err
        try:
            return float(value)
        except (TypeError, ValueError) as err:
            raise BadInputError(f"--metric '{path}' returned {type(value).__name__}, not a number",
                                "return one float, higher is better") from err

    return score
