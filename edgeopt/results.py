"""The results store: one SQLite row per benchmark run, and the regression gate.

Default file: ``$EDGEOPT_DATA_DIR/results.db`` or ``~/.local/share/edgeopt/results.db``.
WAL mode and a busy timeout let several processes write at once without losing rows.
``compare`` applies a Mann-Whitney U test to two runs' per-run latencies together with the
relative change of the median: a regression needs both p < alpha and a slower median by
more than the threshold. Runs compare like for like (:mod:`edgeopt.identity`): the same machine,
CPU and location kind, or ``allow_cross_device`` and a warning in the output.

Schema: ``device`` is where the run was measured (host name or device name), ``cpu_model`` the CPU
it detected, ``built_for`` the artifact's target profile, ``emulated_on`` the emulating host.
Stores written before these columns existed are migrated on open (``PRAGMA user_version`` 1).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import time
from pathlib import Path

from edgeopt.bench.stats import compare_samples
from edgeopt.errors import BadInputError, UsageError
from edgeopt.files import write_text_atomic
from edgeopt.identity import describe, differences, identity_of, setting_warnings
from edgeopt.run_record import RunRecord
from edgeopt.runtime.environment import interference_warning

BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    model TEXT,
    artifact_hash TEXT,
    backend TEXT,
    precision TEXT,
    device TEXT,
    location TEXT,
    label TEXT,
    stage TEXT,
    p50_ms REAL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_model_device ON runs (model, device, created);
"""

COLUMNS = ("id", "created", "model", "artifact_hash", "backend", "precision", "device", "location", "label", "stage", "p50_ms",
           "cpu_model", "built_for", "emulated_on")
IDENTITY_COLUMNS = ("cpu_model", "built_for", "emulated_on")
SCHEMA_VERSION = 1  # 1: identity columns (device = where it ran, not the artifact's profile)


def default_db_path() -> Path:
    from edgeopt.paths import default_results_db

    return default_results_db()


APPLICATION_ID = 0x45444F50  # 'EDOP' in the header: this SQLite file is edgeopt's results store
_SQLITE_MAGIC = b"SQLite format 3\0"
_BASE_COLUMNS = {"id", "created", "model", "backend", "p50_ms", "result_json"}


class StoreError(BadInputError):
    """The results store path is not usable: not SQLite, another program's database, unwritable, absent."""

    kind = "results_store"


def _store_path(db) -> Path:
    return Path(db).expanduser() if db else default_db_path()


def _identify(path: Path) -> str:
    """'new' (absent or empty), 'ours' (marked), 'adopt' (an unmarked edgeopt store of earlier versions);
    a file that is not SQLite, or another program's database, is a :class:`StoreError`. Reads only."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return "new"
    if not path.is_file():
        raise StoreError(f"results store '{path}' is not a file", "pass --db FILE")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as err:
        from edgeopt.outputs import os_error_line

        raise StoreError(f"cannot read the results store {os_error_line(err, path)}") from err
    if head != _SQLITE_MAGIC:
        raise StoreError(f"'{path}' is not an SQLite file, so not an edgeopt results store; it was left untouched",
                         "pass another --db")
    try:
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            conn.execute("PRAGMA application_id").fetchone()
        except sqlite3.OperationalError:  # a read-only WAL store: no -shm can be made beside it
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            cols = {r[1] for r in conn.execute("PRAGMA table_info(runs)")} if "runs" in tables else set()
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise StoreError(f"'{path}' is not a readable SQLite database ({err}); it was left untouched",
                         "pass another --db") from err
    if app_id == APPLICATION_ID:
        return "ours"
    if app_id == 0 and not tables:
        return "new"
    if app_id == 0 and _BASE_COLUMNS <= cols and tables <= {"runs", "sqlite_sequence"}:
        return "adopt"
    shown = ", ".join(sorted(tables - {"sqlite_sequence"})[:4]) or "none"
    raise StoreError(f"'{path}' is another program's SQLite database (tables: {shown}), not an edgeopt results "
                     "store; it was left untouched", "pass another --db")


def check_store_writable(db=None) -> Path:
    """Before a benchmark: the store is edgeopt's (or new) and can be written, else exit 3 naming it."""
    from edgeopt.outputs import check_writable_dir, os_error_line

    path = _store_path(db)
    _identify(path)
    if path.exists() and not os.access(path, os.W_OK):
        err = OSError(30 if _read_only_fs(path) else 13, os.strerror(30 if _read_only_fs(path) else 13))
        raise StoreError(f"cannot write to the results store {os_error_line(err, path)}",
                         "pass a writable --db, or --no-store")
    check_writable_dir(path.parent, what="results store directory")  # WAL needs files beside it
    return path


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect(db: str | os.PathLike | None = None, *, write: bool = True) -> sqlite3.Connection:
    """The results store, opened after checking it is edgeopt's (marked with :data:`APPLICATION_ID`, or
    an unmarked store of earlier versions with edgeopt's ``runs`` table, marked now). ``write=False``
    (read commands): a store that does not exist is an error, not a new empty file, and a read-only
    store is read as it is."""
    path = _store_path(db)
    kind = _identify(path)
    if not write:
        if not path.exists():
            raise StoreError(f"results store '{path}' does not exist",
                             "run edgeopt bench first, or pass the --db it wrote to")
        if kind == "new":
            raise StoreError(f"results store '{path}' is empty (no runs table)", "run edgeopt bench first")
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
            # read-only: read it as it is (immutable: no -wal/-shm files are made)
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
            conn.row_factory = sqlite3.Row
            return conn
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except (OSError, sqlite3.Error) as err:
        raise StoreError(f"cannot open the results store '{path}': {err}", "pass a writable --db") from err
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    try:
        for attempt in range(50):  # switching to WAL needs a moment without other writers
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                if kind != "ours":
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                break
            except sqlite3.OperationalError as err:
                if attempt == 49 or "locked" not in str(err) and "busy" not in str(err):
                    raise
                time.sleep(0.05)
        migrate(conn)
    except sqlite3.Error as err:
        conn.close()
        raise StoreError(f"cannot write to the results store '{path}': {err}",
                         "pass a writable --db, or free space there") from err
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Add the identity columns to an older store and fill them from each run's stored JSON.

    In older stores a local run's ``device`` was the artifact's profile ('pi5' for a run on this
    x86 host): it becomes the host name the run recorded, and the profile moves to ``built_for``.
    One writer does it (BEGIN IMMEDIATE); the others see user_version 1 and skip it.
    """
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
            for col in IDENTITY_COLUMNS:
                if col not in have:
                    conn.execute(f"ALTER TABLE runs ADD COLUMN {col} TEXT")
            for row in conn.execute("SELECT id, result_json FROM runs").fetchall():
                ident = identity_of(json.loads(row[1]))
                conn.execute("UPDATE runs SET device = ?, location = ?, cpu_model = ?, built_for = ?, emulated_on = ?"
                             " WHERE id = ?", (ident["machine"], ident["location"], ident["cpu"], ident["built_for"],
                                             ident["emulated_on"], row[0]))
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _iso_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _model_name(result: dict) -> str | None:
    model = result.get("model_name") or result.get("model")
    return os.path.basename(model) if model else None


def store_run(result: RunRecord | dict, db: str | os.PathLike | None = None, *, created: str | None = None) -> int:
    """Insert one benchmark run (a :class:`RunRecord`; a dict is validated into one, unknown keys are
    errors); returns its ``run_id``.

    The row's device is where the run was measured (``identity``, or one rebuilt from its environment),
    never the profile the artifact was built for."""
    record = result if isinstance(result, RunRecord) else RunRecord.model_validate(result)
    data = record.to_json()
    labels = data.get("labels") or {}
    ident = identity_of(data)
    row = (
        created or _iso_now(),
        _model_name(data),
        data.get("artifact_hash"),
        data.get("backend"),
        data.get("precision"),
        ident["machine"],
        ident["location"],
        labels.get("label"),
        labels.get("stage"),
        (data.get("latency_ms") or {}).get("p50"),
        ident["cpu"],
        ident["built_for"],
        ident["emulated_on"],
        json.dumps(data, default=str),
    )
    conn = connect(db)
    try:
        cur = conn.execute(
            "INSERT INTO runs (created, model, artifact_hash, backend, precision, device, location, label, stage,"
            " p50_ms, cpu_model, built_for, emulated_on, result_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            row,
        )
        return int(cur.lastrowid)
    finally:
        conn.close()


def _migrated(conn: sqlite3.Connection) -> bool:
    return conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION


def _summary(row: sqlite3.Row, migrated: bool) -> dict:
    """One row's summary columns; a store that could not be migrated (read-only) gets the identity
    columns from the run's JSON, as the migration would have."""
    out = dict(row)
    if not migrated:
        ident = identity_of(json.loads(out.pop("_json")))
        out.update(device=ident["machine"], location=ident["location"], cpu_model=ident["cpu"],
                   built_for=ident["built_for"], emulated_on=ident["emulated_on"])
    return out


def _select(migrated: bool) -> str:
    if migrated:
        return ", ".join(COLUMNS)
    return ", ".join(c for c in COLUMNS if c not in IDENTITY_COLUMNS) + ", result_json AS _json"


def list_runs(db=None, *, model: str | None = None, device: str | None = None, limit: int | None = None) -> list[dict]:
    conn = connect(db, write=False)
    try:
        migrated = _migrated(conn)
        q, args = f"SELECT {_select(migrated)} FROM runs WHERE 1=1", []
        if model:
            q += " AND model = ?"
            args.append(model)
        if device and migrated:
            q += " AND device = ?"
            args.append(device)
        q += " ORDER BY id"
        rows = [_summary(r, migrated) for r in conn.execute(q, args)]
    finally:
        conn.close()
    if device and not migrated:
        rows = [r for r in rows if r["device"] == device]
    return rows[:int(limit)] if limit else rows


def get_run(run_id: int, db=None) -> dict:
    conn = connect(db, write=False)
    try:
        migrated = _migrated(conn)
        row = conn.execute(f"SELECT {_select(migrated)}, result_json FROM runs WHERE id = ?", (int(run_id),)).fetchone()
    finally:
        conn.close()
    if row is None:
        raise BadInputError(f"no run with id {run_id} in the results store", "list them with: edgeopt results list")
    out = _summary(row, migrated)
    out["result"] = json.loads(out.pop("result_json"))
    return out


def get_runs(run_ids: list[int] | None = None, db=None, *, model: str | None = None, device: str | None = None) -> list[dict]:
    if run_ids:
        return [get_run(i, db) for i in run_ids]
    return [get_run(r["id"], db) for r in list_runs(db, model=model, device=device)]


class CrossDeviceError(BadInputError):
    kind = "cross_device"


def comparability(a: dict, b: dict, *, allow_cross_device: bool = False) -> list[str]:
    """Warnings for comparing stored runs ``a`` and ``b``; raises when they were measured on
    different devices or location kinds (unless ``allow_cross_device``, which makes it a warning)."""
    ia, ib = identity_of(a["result"]), identity_of(b["result"])
    diff = differences(ia, ib)
    warnings = []
    if diff:
        line = f"runs {a['id']} and {b['id']} were measured on different devices ({'; '.join(diff)})"
        if not allow_cross_device:
            raise CrossDeviceError(line, "compare runs of one device, or pass --allow-cross-device (the output "
                                         "then carries this warning)")
        warnings.append(f"cross-device comparison: {line}: {describe(ia)} vs {describe(ib)}")
    warnings += setting_warnings(a["result"], b["result"])
    return warnings


def compare_runs(a_id: int, b_id: int, db=None, *, threshold: float = 0.05, alpha: float = 0.01,
                 allow_cross_device: bool = False) -> dict:
    if threshold < 0:
        raise UsageError("--threshold must be >= 0", "e.g. --threshold 0.05 for 5 %")
    a, b = get_run(a_id, db), get_run(b_id, db)
    warnings = comparability(a, b, allow_cross_device=allow_cross_device)
    out = compare_samples(a["result"].get("samples_ms") or [], b["result"].get("samples_ms") or [],
                          threshold=threshold, alpha=alpha)
    out["a"] = {k: a[k] for k in COLUMNS}
    out["b"] = {k: b[k] for k in COLUMNS}
    if a["artifact_hash"] != b["artifact_hash"]:
        out["note"] = "the two runs measured different artifacts"
    out["identity_a"], out["identity_b"] = identity_of(a["result"]), identity_of(b["result"])
    out["cross_device"] = bool(differences(out["identity_a"], out["identity_b"]))
    out["warnings"] = warnings + [f"run {r['id']}: {w}" for r in (a, b)
                                  if (w := interference_warning(r["result"].get("environment") or {}))]
    return out


def export_runs(output: str | os.PathLike, fmt: str = "json", db=None) -> dict:
    """Write every run (JSON: full results; CSV: the summary columns) atomically."""
    if fmt not in ("json", "csv"):
        raise UsageError(f"unknown export format '{fmt}'", "use --format json or --format csv")
    rows = list_runs(db)
    if fmt == "json":
        text = json.dumps({"runs": [get_run(r["id"], db) for r in rows]}, default=str)
    else:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
        text = buf.getvalue()
    out = write_text_atomic(output, text)
    return {"output": str(out), "format": fmt, "runs": len(rows)}
