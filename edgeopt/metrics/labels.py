"""Labels checked against what the model's output can mean, before any work.

Accepted forms (documented in the README's "Metrics" section):

* classification / per-position: integer class indices (whole-number floats are taken too), or one-hot /
  probability arrays with the class axis last, converted to indices; ``-1`` marks a position to ignore;
* CTC: a padded integer array ``[N, L]`` where ``-1`` is padding (an ``.npz`` cannot hold ragged arrays),
  or, through the API, a list of sequences / an object array;
* maps: masks shaped like the map, 0/1 (or probabilities, thresholded).

Strings, a wrong count, indices out of range or fractions are :class:`BadDataError` (exit 3), one line.
"""

from __future__ import annotations

import numpy as np

from edgeopt.errors import BadDataError

HINT = "labels are class indices 0..C-1 (one int per sample), or one-hot rows; see README 'Metrics'"


def refuse_non_numeric(labels, role: str = "eval") -> None:
    """Strings / objects that are not sequences are refused (the loader calls this for every file)."""
    arr = np.asarray(labels) if not isinstance(labels, np.ndarray) else labels
    if arr.dtype.kind in "USa":
        sample = ", ".join(repr(str(v)) for v in arr.ravel()[:3])
        raise BadDataError(f"--{role}: labels are strings ({sample}…); edgeopt needs class indices",
                           "map each class name to its index in the model's output (0..C-1) and save ints")
    if arr.dtype.kind == "b":
        return
    if arr.dtype.kind not in "iuf" and arr.dtype.kind != "O":
        raise BadDataError(f"--{role}: labels have dtype {arr.dtype}; edgeopt needs class indices", HINT)


def _whole(arr: np.ndarray, role: str, what: str) -> np.ndarray:
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise BadDataError(f"--{role}: {what} hold fractions or NaN ({arr.ravel()[:3].tolist()}…); "
                               "they must be whole class indices", HINT)
    return arr.astype(np.int64)


def _in_range(idx: np.ndarray, classes: int, role: str, ignore: int | None = -1) -> None:
    valid = idx if ignore is None else idx[idx != ignore]
    if valid.size and (valid.min() < 0 or valid.max() >= classes):
        bad = valid[(valid < 0) | (valid >= classes)]
        raise BadDataError(f"--{role}: labels out of range: {sorted(set(bad.tolist()))[:5]} for a model with "
                           f"{classes} classes (0..{classes - 1})", HINT)


def count_check(labels, n: int, role: str) -> None:
    if np.ndim(labels) == 0:  # a scalar saved as 'labels' (found by tests/cli/test_fuzz.py)
        raise BadDataError(f"--{role}: 'labels' is a single value, not one label per sample", "one label per sample")
    if len(labels) != n:
        raise BadDataError(f"--{role}: {len(labels)} labels for {n} samples", "one label per sample")


def class_indices(labels, n: int, classes: int, *, role: str = "eval", positions: tuple = ()) -> np.ndarray:
    """Labels as int indices shaped ``[n, *positions]``: from indices or one-hot/probability rows."""
    count_check(labels, n, role)
    arr = np.asarray(labels)
    refuse_non_numeric(arr, role)
    want = (n, *positions)
    if arr.shape == (*want, classes) and classes > 1 and (arr.dtype.kind == "f" or arr.max(initial=0) <= 1):
        if arr.dtype.kind == "f" and np.any(arr < 0):
            raise BadDataError(f"--{role}: labels shaped {list(arr.shape)} look one-hot but hold negative values", HINT)
        return np.argmax(arr, axis=-1).astype(np.int64)  # one-hot / probabilities -> indices
    if arr.shape != want and arr.size == int(np.prod(want)) and arr.ndim >= 1 and arr.shape[0] == n:
        arr = arr.reshape(want)  # e.g. [N,1] for [N]
    if arr.shape != want:
        raise BadDataError(f"--{role}: labels shaped {list(arr.shape)} don't fit the model's output "
                           f"(expected {list(want)} class indices or {list((*want, classes))} one-hot)", HINT)
    idx = _whole(arr, role, "labels")
    _in_range(idx, max(classes, 2), role)
    return idx


def sequences(labels, n: int, classes: int, blank: int, *, role: str = "eval") -> list[tuple[int, ...]]:
    """CTC label sequences: a ``[N, L]`` int array padded with -1, or a list of sequences."""
    count_check(labels, n, role)
    if isinstance(labels, np.ndarray) and labels.dtype.kind != "O":
        refuse_non_numeric(labels, role)
        arr = labels.reshape(n, -1) if labels.ndim != 2 else labels
        rows = [r[r != -1] for r in _whole(arr, role, "label sequences")]
    else:
        rows = []
        for r in labels:
            a = np.asarray(r)
            refuse_non_numeric(a, role)
            rows.append(_whole(a.ravel(), role, "label sequences"))
    out = []
    for r in rows:
        _in_range(r, classes, role, ignore=None)
        if np.any(r == blank):
            raise BadDataError(f"--{role}: a label sequence holds the CTC blank index {blank}",
                               "pad sequences with -1, and give --ctc-blank if the blank is not class 0")
        out.append(tuple(int(v) for v in r))
    return out


def masks(labels, n: int, shape: tuple, threshold: float, *, role: str = "eval") -> np.ndarray:
    """Map labels as booleans ``[n, *shape]`` (0/1 masks, or probabilities thresholded)."""
    count_check(labels, n, role)
    arr = np.asarray(labels)
    refuse_non_numeric(arr, role)
    if arr.size != n * int(np.prod(shape)):
        raise BadDataError(f"--{role}: mask labels shaped {list(arr.shape)} don't fit maps shaped {list(shape)}",
                           "give one 0/1 mask per sample, shaped like the output map")
    arr = arr.reshape(n, *shape)
    if arr.dtype.kind == "b":
        return arr
    if np.any(arr < 0) or np.any(arr > 1):
        raise BadDataError(f"--{role}: mask labels must be 0/1 or probabilities in [0, 1]", "save 0/1 masks")
    return arr > threshold if arr.dtype.kind == "f" else arr.astype(bool)
