"""Apache TVM 0.27 (Relax) building blocks shared by the TVM backend and ``edgeopt tune``.

* :func:`resolve_target` turns a profile's target dict into a complete one (the host's ``mcpu``
  filled in with ``llvm_get_system_cpu()`` when the target is this machine's architecture).
* :func:`check_ops` compares the ONNX graph with the Relax importer's convert map *before*
  importing, so an unsupported op is one line naming it (exit 3), not a TVM traceback.
* :func:`import_onnx` → a Relax ``IRModule`` with the weights bound as constants (the library
  bundles them: ``main`` takes only the model's inputs, in ONNX order).
* :func:`build` compiles it untuned (``tvm.compile``) or with a MetaSchedule database
  (``compile_relax``); :func:`export` writes ``model.so`` atomically, cross-compiled with
  ``<triple>-g++`` when the target is not this machine (missing compiler → exit 4 naming the apt package).
* :func:`tuning_key` is the content hash (backend-input graph bytes + canonical target) under
  which ``edgeopt tune`` saves a database and ``convert`` finds it again; :func:`database_sha256` and
  :func:`tuning_cache_sha256` are the databases' content identity, which the plan carries.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
from pathlib import Path
from typing import Any

from edgeopt.deps import require, version_of
from edgeopt.enums import BackendName
from edgeopt.errors import BadProfileError, MissingDependencyError, UnsupportedOpError
from edgeopt.files import atomic_path
from edgeopt.outputs import publish
from edgeopt.paths import CacheArea, backend_cache_subdir, cache_subdir

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def host_arch() -> str:
    return _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())


def cpu_target(target: dict) -> dict:
    """The CPU (llvm) part of a target dict: the target itself, or its ``host`` for a GPU target."""
    return target if target.get("kind") == "llvm" else dict(target.get("host") or {})


def target_arch(target: dict) -> str:
    triple = cpu_target(target).get("mtriple") or f"{host_arch()}-linux-gnu"
    arch = triple.split("-")[0]
    return _ARCH_ALIASES.get(arch, arch)


def is_cross(target: dict) -> bool:
    return target_arch(target) != host_arch()


def resolve_target(target: dict | None) -> dict:
    """A complete target dict: default host llvm; on this machine's arch, ``mcpu`` from LLVM."""
    if target is not None and not isinstance(target, dict):
        raise BadProfileError(f"tvm: target must be a dict like {{kind: llvm, mtriple: ..., mcpu: ...}}, got {target!r}",
                              "targets are dicts in TVM 0.27 (strings and tags are not used)")
    out: dict[str, Any] = json.loads(json.dumps(target or {"kind": "llvm"}))
    if "kind" not in out:
        raise BadProfileError("tvm: target has no 'kind'", "e.g. {kind: llvm, mtriple: aarch64-linux-gnu, mcpu: cortex-a76}")
    cpu = out if out["kind"] == "llvm" else out.setdefault("host", {"kind": "llvm"})
    cpu.setdefault("mtriple", f"{host_arch()}-linux-gnu")
    if "mcpu" not in cpu and not is_cross(out):
        tvm = require("tvm", "the TVM backend")
        cpu["mcpu"] = str(tvm.target.codegen.llvm_get_system_cpu())
    return out


def make_target(target: dict):
    tvm = require("tvm", "the TVM backend")
    try:
        return tvm.target.Target(target)
    except Exception as err:  # noqa: BLE001 - TVM raises its own error types for a bad target
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1][:200]
        raise BadProfileError(f"tvm: target {json.dumps(target)} is not valid: {first}",
                              "check the profile's tvm target (kind, mtriple, mcpu, num-cores)") from err


def device_kind(target: dict) -> str:
    """Where the library runs: ``cpu`` or the GPU kind (``cuda``…)."""
    return "cpu" if target.get("kind") == "llvm" else str(target["kind"])


# --------------------------------------------------------------------------- import


def check_ops(proto) -> None:
    """Raise :class:`UnsupportedOpError` naming the ops TVM's ONNX importer has no converter for."""
    require("tvm", "the TVM backend")
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    known = set(_get_convert_map()) | {"If", "Constant"}
    missing: set[str] = set()

    def walk(graph) -> None:
        for node in graph.node:
            if node.op_type not in known:
                missing.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}")
            for attr in node.attribute:
                if attr.g is not None and attr.g.node:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(proto.graph)
    if missing:
        names = ", ".join(sorted(missing))
        raise UnsupportedOpError(f"tvm: the Relax ONNX importer does not support op(s): {names}",
                                 "use another --backend (onnxruntime supports every standard op), or replace the op")


def import_onnx(proto):
    """Relax module from an ONNX model with static shapes; weights bound as constants."""
    tvm = require("tvm", "the TVM backend")
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from edgeopt.model import graph_inputs

    dynamic = [f"{t.name}{list(t.shape)}" for t in graph_inputs(proto) if not all(isinstance(d, int) for d in t.shape)]
    if dynamic:
        raise UnsupportedOpError(f"tvm: inputs need static shapes, got {', '.join(dynamic)}",
                                 "give --input-shape NAME=1x3x224x224")
    check_ops(proto)
    mod = from_onnx(proto, keep_params_in_input=False)
    seq = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()])
    return seq(mod)


def fused_module(mod, target):
    """The module as MetaSchedule sees it (dispatch, legalize, fuse): the one tasks are extracted from.

    Same passes, same order, as ``meta_schedule.relax_integration.compile_relax`` applies before
    ``MetaScheduleApplyDatabase``, so tuned workloads match at build time.
    """
    tvm = require("tvm", "the TVM backend")
    from tvm import relax

    try:
        dispatch = relax.pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def import_tensor_intrin() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (MetaSchedule needs it) about 3x faster.

    Each ``@T.prim_func`` there calls ``inspect.stack()``, which reads the source line of every frame;
    that is most of the ~27-90 s the import takes on 2 cores. The parser only reads those lines to see
    whether a function is defined inside a TVMScript class, and none of the intrinsics is, so the
    frames are taken without source context (``inspect.stack(0)``) during this one import.
    """
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    original = inspect.stack
    inspect.stack = lambda context=1: original(0)
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.stack = original


# --------------------------------------------------------------------------- build and export


def open_database(db_dir: Path):
    """MetaSchedule's JSON database in ``db_dir`` (created when absent)."""
    require("tvm", "the TVM backend")
    from tvm.s_tir import meta_schedule as ms

    db_dir.mkdir(parents=True, exist_ok=True)
    return ms.database.JSONDatabase(path_workload=str(db_dir / WORKLOAD_FILE),
                                    path_tuning_record=str(db_dir / RECORD_FILE), module_equality="structural")


def database_records(db_dir: Path) -> int:
    """Tuning records in a JSON database dir (lines of its record file), 0 when there is none."""
    f = Path(db_dir) / RECORD_FILE
    if not f.is_file():
        return 0
    with open(f, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def build(mod, target, db_dir: Path | None = None):
    """Compile ``mod`` (untuned, or with the MetaSchedule database in ``db_dir``) → VMExecutable."""
    tvm = require("tvm", "the TVM backend")
    if db_dir is None:
        return tvm.compile(mod, target=target)
    from tvm.s_tir import meta_schedule as ms

    return ms.relax_integration.compile_relax(open_database(db_dir), mod, target, None)


def cross_compiler_for(target: dict) -> str | None:
    """The C++ cross compiler for a foreign target (None for this machine); exit 4 when it is absent."""
    if not is_cross(target):
        return None
    triple = cpu_target(target).get("mtriple", "")
    arch = target_arch(target)
    gnu = f"{arch}-linux-gnu" if triple.startswith(arch) else triple
    compiler = f"{gnu}-g++"
    if shutil.which(compiler) is None:
        raise MissingDependencyError(f"tvm: cross compiler '{compiler}' not found (needed to build for {triple})",
                                     f"install it with: apt-get install g++-{gnu}")
    return compiler


def export(executable, path: Path, target: dict) -> None:
    """Write the shared library at ``path`` atomically (temp file, then rename)."""
    compiler = cross_compiler_for(target)
    with atomic_path(path, mode=None) as tmp:  # the linker sets the library's mode
        if compiler:
            from tvm.support import cc

            executable.export_library(str(tmp), fcompile=cc.cross_compiler(compiler))
        else:
            executable.export_library(str(tmp))


def elf_machine(path: Path) -> str | None:
    """The ELF machine of a shared library: ``x86_64``, ``aarch64``… (None when not ELF)."""
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF":
        return None
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return {62: "x86_64", 183: "aarch64", 40: "arm", 3: "x86", 243: "riscv"}.get(machine, str(machine))


# --------------------------------------------------------------------------- versions and the tuning cache


def versions() -> dict[str, str | None]:
    return {"apache-tvm": version_of("apache-tvm"), "apache-tvm-ffi": version_of("apache-tvm-ffi")}


def canonical_target(target: dict) -> str:
    return json.dumps(target, sort_keys=True, separators=(",", ":"))


def tuning_key(proto, target: dict) -> str:
    """Content hash of the backend-input ONNX graph (with its weights) and the resolved target."""
    h = hashlib.sha256()
    h.update(proto.graph.SerializeToString(deterministic=True))
    h.update(b"\0")
    h.update(canonical_target(target).encode())
    return h.hexdigest()[:24]


def tuning_dir(key: str) -> Path:
    return backend_cache_subdir(BackendName.TVM.value, "tuning") / key


NO_DATABASE = "none"


def database_sha256(db_dir: Path) -> str:
    """Content hash of a JSON database's workloads and records; :data:`NO_DATABASE` when it has no records."""
    from edgeopt.files import file_sha256

    d = Path(db_dir)
    if database_records(d) == 0:
        return NO_DATABASE
    h = hashlib.sha256()
    for name in (WORKLOAD_FILE, RECORD_FILE):
        f = d / name
        h.update(f"{name}\0{file_sha256(f) if f.is_file() else ''}\n".encode())
    return h.hexdigest()


def tuning_cache_sha256() -> str:
    """Content hash of every database in the tuning cache (:data:`NO_DATABASE` when none has records).

    Which of them a build applies is found by :func:`tuning_key` of the backend-input graph, known only once
    the stages before the backend have run; the planner hashes them all, so any ``edgeopt tune`` that writes
    to the cache changes the plan (and the cache keys) of every TVM build that might use it.
    """
    root = backend_cache_subdir(BackendName.TVM.value, "tuning")
    parts = [f"{d.name}\0{sha}" for d in sorted(root.iterdir()) if d.is_dir()
             and (sha := database_sha256(d)) != NO_DATABASE] if root.is_dir() else []
    return hashlib.sha256("\n".join(parts).encode()).hexdigest() if parts else NO_DATABASE


# --------------------------------------------------------------------------- a runtime-only TVM for a device

BUNDLE_PACKAGES = ("apache-tvm", "apache-tvm-ffi", "numpy", "ml_dtypes", "typing_extensions")
_SKIP_PARTS = {"__pycache__", "3rdparty", "src", "include", "tests", "testing"}
_SKIP_FILES = {"libtvm_compiler.so"}


def _keep(rel: str) -> bool:
    parts = rel.replace("\\", "/").split("/")
    return not (set(parts[:-1]) & _SKIP_PARTS) and parts[-1] not in _SKIP_FILES and not rel.endswith(".pyc")


def _copy_installed(site: Path) -> None:
    import importlib.util

    for module in ("tvm", "tvm_ffi", "numpy", "ml_dtypes", "typing_extensions"):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise MissingDependencyError(f"device bundle: {module} is not installed here", "pip install 'edgeopt[tvm]'")
        origin = Path(spec.origin)
        if origin.name != "__init__.py":  # a single-file module
            shutil.copy2(origin, site / origin.name)
            continue
        for f in origin.parent.rglob("*"):
            rel = f.relative_to(origin.parent.parent).as_posix()
            if f.is_file() and _keep(rel):
                (site / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, site / rel)
        libs = origin.parent.parent / f"{module}.libs"  # auditwheel's vendored libraries (numpy.libs)
        if libs.is_dir():
            shutil.copytree(libs, site / libs.name)


def _download_wheels(wheel_dir: Path, arch: str, python_version: str) -> list[Path]:
    import subprocess
    import sys

    pins = {"apache-tvm": version_of("apache-tvm"), "apache-tvm-ffi": version_of("apache-tvm-ffi"),
            "numpy": version_of("numpy"), "ml_dtypes": version_of("ml_dtypes")}
    reqs = [f"{p}=={pins[p]}" if pins.get(p) else p for p in BUNDLE_PACKAGES]
    plats = [f"manylinux_2_{v}_{arch}" for v in (35, 28, 27, 17)] + [f"manylinux2014_{arch}"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest",
           str(wheel_dir), "--python-version", python_version, "--implementation", "cp",
           *[a for p in plats for a in ("--platform", p)], *reqs]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1][:200]
        raise MissingDependencyError(f"device bundle: could not get {arch} wheels ({last})",
                                     f"put the {arch} wheels of {', '.join(BUNDLE_PACKAGES)} in a folder and pass wheel_dir")
    return sorted(wheel_dir.glob("*.whl"))


def device_bundle(out_dir, arch: str | None = None, *, wheel_dir=None, python_version: str = "3.11") -> dict:
    """A runtime-only TVM (no ``libtvm_compiler.so``) plus numpy for ``arch``, in ``out_dir/site``.

    For this machine's architecture the installed packages are copied; for another one (aarch64)
    the wheels come from ``wheel_dir`` (or are fetched there with ``pip download`` for
    ``python_version``). On the device: ``PYTHONPATH=out_dir/site TVM_USE_RUNTIME_LIB=1 python3 -m
    edgeopt.runtime ...`` (the TVM runner sets TVM_USE_RUNTIME_LIB itself when the compiler library is
    absent). Written atomically; returns sizes in bytes.
    """
    import tempfile
    import zipfile

    out = Path(out_dir)
    arch = _ARCH_ALIASES.get((arch or host_arch()).lower(), arch or host_arch())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        site = tmp / "site"
        site.mkdir()
        if arch == host_arch() and wheel_dir is None:
            _copy_installed(site)
            source = "installed packages"
        else:
            wd = Path(wheel_dir) if wheel_dir else cache_subdir(CacheArea.WHEELS) / arch
            wd.mkdir(parents=True, exist_ok=True)
            wheels = [w for w in wd.glob("*.whl") if arch in w.name or w.name.endswith("-none-any.whl")]
            names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
            if not {p.replace("_", "-") for p in BUNDLE_PACKAGES} <= names:
                wheels = [w for w in _download_wheels(wd, arch, python_version)
                          if arch in w.name or w.name.endswith("-none-any.whl")]
            for w in wheels:
                with zipfile.ZipFile(w) as z:
                    for member in z.namelist():
                        if ".dist-info/" not in member and _keep(member) and not member.endswith("/"):
                            z.extract(member, site)
            for so in site.rglob("*.so*"):
                so.chmod(0o755)
            source = f"wheels in {wd}"
        sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in site.iterdir() if p.is_dir()}
        info = {"arch": arch, "source": source, "site": str(out / "site"), "bytes": sum(sizes.values()),
                "packages_bytes": sizes, "env": {"TVM_USE_RUNTIME_LIB": "1", "PYTHONPATH": str(out / "site")},
                "tvm": version_of("apache-tvm"), "without": sorted(_SKIP_FILES),
                "edgeopt_version": version_of("edgeopt")}
        (tmp / "bundle.json").write_text(json.dumps(info, indent=1))
        publish(tmp, out, force=True)  # the old bundle stays until the new one is in place
        return info
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
