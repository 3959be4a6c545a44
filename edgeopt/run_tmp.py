"""A temporary directory of the run's own, for the libraries' leftovers.

Libraries leave files in the user's temp dir that outlive the run: ONNX Runtime writes a ``.ses`` session id
there when it is imported, TensorFlow its ``__autograph_generated_file*.py``, torch its ``torchinductor_*``
cache. :func:`run_temp_dir` makes one directory (in the user's temp dir) for the whole run, points every way a
library finds a temp dir at it (``TMPDIR``/``TEMP``/``TMP`` for native code and subprocesses,
``tempfile.tempdir`` for Python) and removes it whatever the outcome: an error, a missed gate, Ctrl-C.
Nested runs (``optimize``'s builds) share the outer one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV_VARS = ("TMPDIR", "TEMP", "TMP")
PREFIX = "edgeopt-run-"
_ACTIVE: list[Path] = []


@contextmanager
def run_temp_dir() -> Iterator[Path]:
    """The run's own temp dir (see the module doc); restores the environment and removes the dir on exit."""
    if _ACTIVE:
        yield _ACTIVE[-1]
        return
    saved_tempdir = tempfile.tempdir  # before mkdtemp, which caches the temp dir it found there
    path = Path(tempfile.mkdtemp(prefix=PREFIX))
    saved_env = {k: os.environ.get(k) for k in ENV_VARS}
    for k in ENV_VARS:
        os.environ[k] = str(path)
    tempfile.tempdir = str(path)
    _ACTIVE.append(path)
    try:
        yield path
    finally:
        _ACTIVE.pop()
        tempfile.tempdir = saved_tempdir
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(path, ignore_errors=True)
