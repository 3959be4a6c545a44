"""What the core asks of the TVM backend besides converting (see ``converters/hooks.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.converters.hooks import BackendHooks

# apache-tvm-ffi from this version on segfaults when a MetaSchedule TuneContext is made
BAD_FFI = (0, 1, 15)


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


class TVMHooks(BackendHooks):
    consumer = "edgeopt.converters.backends.tvm.consumer"
    host_rank = 30
    loggers = ("tvm",)
    tunes = True  # MetaSchedule: only a tuned build pays
    tune_requires = ("tvm", "psutil")  # MetaSchedule needs psutil
    emulated = True  # the aarch64 apache-tvm wheel, kept to its runtime library (see prepare_emulated_site)
    tools = {
        "aarch64-linux-gnu-g++": ("g++-aarch64-linux-gnu", "cross-compiling TVM libraries for aarch64 devices", ()),
        "g++": ("g++", "compiling TVM libraries for this machine", ()),
    }

    def host_runtime(self, arch: str, cores: int) -> dict | None:
        return {"name": "tvm", "settings": {"target": {"kind": "llvm", "mtriple": f"{arch}-linux-gnu",
                                                       "num-cores": cores}}}

    def device_requirements(self, dist: str) -> tuple[str, ...]:
        """apache-tvm at the host's version (the library's ABI is the compiler's), tvm-ffi below the version that
        segfaults, and what ``import tvm`` needs besides numpy."""
        from edgeopt.deps import version_of

        host = version_of(dist)
        return (f"{dist}=={host}" if host else dist, f"apache-tvm-ffi<{'.'.join(map(str, BAD_FFI))}", "ml_dtypes",
                "typing_extensions")

    def prepare_emulated_site(self, site: Path) -> None:
        """Drop ``libtvm_compiler.so`` (~250 MB, LLVM inside): without it ``import tvm`` loads the runtime library
        alone, which is all a compiled library needs, and qemu never maps the compiler."""
        (site / "tvm" / "lib" / "libtvm_compiler.so").unlink(missing_ok=True)

    def doctor_warnings(self, runtimes: list[dict]) -> list[str]:
        ffi = next((r for r in runtimes if r["module"] == "tvm_ffi"), None)
        if ffi and ffi["version"] and _version_tuple(ffi["version"]) >= BAD_FFI:
            return [f"apache-tvm-ffi {ffi['version']} segfaults when MetaSchedule tunes: pin 'apache-tvm-ffi<0.1.15'"]
        return []

    def tune(self, proto: Any, config: Any, tuning_db: str | Path | None, **how: Any) -> dict:
        from . import build as tb
        from .tune import tune_database

        target = tb.resolve_target(config.target)
        key = tb.tuning_key(proto, target)
        given = tuning_db or config.tuning_db
        db_dir = Path(given).expanduser() if given else tb.tuning_dir(key)
        run = tune_database(proto, target, db_dir, **how)
        return {"target": target, "key": key, "database": str(db_dir), "runner": run.runner, "tasks": run.tasks,
                "trials_measured": run.trials_measured, "trials_failed": run.trials_failed,
                "records": tb.database_records(db_dir), "stopped_by": run.stopped_by, "cost_model": run.cost_model,
                "best_ms": run.best_ms}


    def not_loadable_here(self, manifest: dict) -> str | None:
        from .consumer import not_loadable_here

        return not_loadable_here(manifest)


HOOKS = TVMHooks()
