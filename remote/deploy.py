"""Putting an artifact and the on-device runtime on a device, and cleaning up after.

Layout under the device's work dir::

    cache/<sha256>              content-addressed copies of every file ever uploaded
    run-<id>/.lock              host=<name> pid=<host pid>, then rpid=<remote runner pid>
    run-<id>/artifact/...       hard links into cache/ (copies where links fail)
    run-<id>/edgeopt_runtime/   the edgeopt/runtime package, shipped as-is

A file whose sha256 already sits in ``cache/`` is not sent again; every sent file is hashed on
the device after upload. The next run removes stale run dirs: older than ``max_age_hours``, or
locked by a process that is gone.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from edgeopt.errors import BadInputError, RemoteError
from edgeopt.files import file_sha256
from edgeopt.host import pid_alive

from .transport import Transport

RUNTIME_NAME = "edgeopt_runtime"
CACHE = "cache"
RUN_PREFIX = "run-"

# Constant scripts; every path reaches them as a positional argument, never as code.
LINK_SCRIPT = 'while [ "$#" -ge 2 ]; do ln -f -- "$1" "$2" 2>/dev/null || cp -f -- "$1" "$2" || exit 1; shift 2; done'
LIST_SCRIPT = r'''cd "$1" || exit 0
now=$(date +%s)
for d in run-*; do
  [ -d "$d" ] || continue
  m=$(stat -c %Y "$d" 2>/dev/null || echo 0)
  lock=none; alive=none
  if [ -f "$d/.lock" ]; then
    lock=yes
    rpid=$(sed -n 's/^rpid=//p' "$d/.lock" | tail -n 1)
    if [ -n "$rpid" ]; then if kill -0 "$rpid" 2>/dev/null; then alive=yes; else alive=no; fi; fi
  fi
  hpid=$(sed -n 's/^pid=//p' "$d/.lock" 2>/dev/null); host=$(sed -n 's/^host=//p' "$d/.lock" 2>/dev/null)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$d" "$((now-m))" "$lock" "$alive" "$hpid" "$host"
done'''
# cd into the run dir, record the runner's PID in the lock, become the runner
RUN_WRAPPER = 'cd "$1" || exit 97; echo "rpid=$$" >> .lock; shift; exec "$@"'


@dataclass
class UploadStats:
    files: int = 0
    uploaded: int = 0
    skipped: int = 0
    bytes_uploaded: int = 0
    bytes_total: int = 0
    put_calls: int = 0
    verified: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verified"] = len(self.verified)
        return d


def runtime_package_dir() -> Path:
    import edgeopt.runtime

    return Path(edgeopt.runtime.__file__).resolve().parent


def _walk(root: Path, prefix: str) -> list[tuple[Path, str]]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            out.append((p, f"{prefix}/{p.relative_to(root).as_posix()}"))
    return out


def bundle_files(artifact_dir: str | os.PathLike, runtime_dir: str | os.PathLike | None = None,
                 inputs: str | os.PathLike | None = None, *, with_runtime: bool = True) -> list[tuple[Path, str]]:
    """(local file, path inside the run dir) for the artifact, the runtime (unless not ``with_runtime``) and the
    inputs."""
    art = Path(artifact_dir)
    if not (art / "manifest.json").is_file():
        raise BadInputError(f"'{art}' is not an artifact directory (no manifest.json)",
                            "give the directory 'edgeopt convert' wrote, or an .onnx model")
    files = _walk(art, "artifact")
    if with_runtime:
        files += _walk(Path(runtime_dir or runtime_package_dir()), RUNTIME_NAME)
    if inputs:
        files.append((Path(inputs), "inputs.npz"))
    return files


def verify_uploaded(transport: Transport, run_dir: str, files: dict[str, str]) -> None:
    """The artifact's files as the device sees them in ``run_dir`` match the manifest's sha256 (one
    ``sha256sum`` there), or exit 3 naming the first that differs."""
    from edgeopt.artifact import verify_files

    remote = {name: f"{run_dir}/artifact/{name}" for name in files}
    got = transport.sha256_many(sorted(remote.values()))
    verify_files(run_dir, files, hashes={n: got.get(r) for n, r in remote.items()},
                 where=f"{transport.name}: uploaded artifact '{run_dir}/artifact'")


def new_run_dir() -> str:
    return f"{RUN_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def write_lock(transport: Transport, run_dir: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".lock", delete=False) as f:
        f.write(f"host={socket.gethostname()}\npid={os.getpid()}\n")
    try:
        transport.put(f.name, f"{run_dir}/.lock")
    finally:
        os.unlink(f.name)


def upload(transport: Transport, files: list[tuple[Path, str]], run_dir: str,
           progress=None) -> UploadStats:
    """Send ``files`` into ``run_dir`` through the content-addressed cache."""
    stats = UploadStats(files=len(files))
    digests = {local: file_sha256(local) for local, _ in files}
    wanted = {f"{CACHE}/{d}": local for local, d in digests.items()}
    on_device = transport.sha256_many(sorted(wanted))
    sent = []
    for i, (cache_path, local) in enumerate(sorted(wanted.items())):
        size = local.stat().st_size
        stats.bytes_total += size
        if on_device.get(cache_path) == cache_path.rsplit("/", 1)[1]:
            stats.skipped += 1
        else:
            transport.put(local, cache_path)
            stats.put_calls += 1
            stats.uploaded += 1
            stats.bytes_uploaded += size
            sent.append(cache_path)
        if progress:
            progress((i + 1) / len(wanted))
    check = transport.sha256_many(sent)
    bad = [p for p in sent if check.get(p) != p.rsplit("/", 1)[1]]
    if bad:
        transport.run(["rm", "-f", "--", *(transport.confine(p) for p in bad)], timeout=60)
        raise RemoteError(f"{transport.name}: {len(bad)} file(s) arrived corrupted (sha256 mismatch)",
                          "check the device's disk and connection, then retry")
    stats.verified = sent
    dirs = sorted({transport.confine(f"{run_dir}/{rel}").rsplit("/", 1)[0] for _, rel in files})
    res = transport.run(["mkdir", "-p", "--", *dirs], timeout=60)
    if res.rc != 0:
        raise RemoteError(f"{transport.name}: cannot create the run directory: {res.stderr.strip()[:200]}")
    pairs: list[str] = []
    for local, rel in files:
        pairs += [transport.confine(f"{CACHE}/{digests[local]}"), transport.confine(f"{run_dir}/{rel}")]
    res = transport.run(["sh", "-c", LINK_SCRIPT, "edgeopt-link", *pairs], timeout=120)
    if res.rc != 0:
        raise RemoteError(f"{transport.name}: cannot place files in the run directory: {res.stderr.strip()[:200]}")
    return stats


def list_runs(transport: Transport) -> list[dict]:
    res = transport.run(["sh", "-c", LIST_SCRIPT, "edgeopt-list", transport.work_dir], timeout=60)
    runs = []
    for line in res.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 6 or not parts[0].startswith(RUN_PREFIX):
            continue
        name, age, lock, alive, hpid, host = parts
        runs.append({"name": name, "age_s": int(age or 0), "locked": lock == "yes", "runner_alive": alive,
                     "host_pid": int(hpid) if hpid.isdigit() else None, "host": host or None})
    return runs


def is_stale(run: dict, max_age_hours: float) -> bool:
    if run["age_s"] > max_age_hours * 3600:
        return True
    if not run["locked"]:
        return False  # kept on purpose (--keep): only age removes it
    if run["runner_alive"] == "no":
        return True
    if run["runner_alive"] == "none" and run["host"] == socket.gethostname() and run["host_pid"]:
        return not pid_alive(run["host_pid"])  # an upload by a process of this machine that died
    return False


def clean_stale(transport: Transport, max_age_hours: float = 24.0) -> list[str]:
    stale = [r["name"] for r in list_runs(transport) if is_stale(r, max_age_hours)]
    if stale:
        remove_run(transport, *stale)
    return stale


def remove_run(transport: Transport, *run_dirs: str) -> None:
    paths = [transport.confine(d) for d in run_dirs]
    if any(p == transport.work_dir.rstrip("/") or not p.rsplit("/", 1)[1].startswith(RUN_PREFIX) for p in paths):
        raise RemoteError("refusing to remove a directory that is not a run directory")
    transport.run(["rm", "-rf", "--", *paths], timeout=120)


def release_lock(transport: Transport, run_dir: str) -> None:
    transport.run(["rm", "-f", "--", transport.confine(f"{run_dir}/.lock")], timeout=30)
