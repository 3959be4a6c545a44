"""The artifact: a directory with ``manifest.json`` and the model files it lists (with sha256).

``write_manifest`` fills ``files`` from the directory itself, so every file the backend wrote is
hashed; ``load_artifact`` checks them again (a changed or missing file is an error, exit 3).

Determinism: ``manifest.json`` holds only what the inputs decide. ``created`` is
``$SOURCE_DATE_EPOCH`` when set (the reproducible-builds convention), else now. What varies from
build to build (stage durations and other ``*seconds`` timings, the host, its load, the wall-clock
time) goes into ``build.json``, the one file of an artifact that varies: it is not in ``files``,
and ``manifest.build_facts`` names it. ``load_artifact`` merges it back into the returned manifest
(so readers still see ``stages[].seconds``). The pipeline leaves it out of ``dist/`` (its facts go
into ``summary.json``), so a dist artifact directory and its tarball are byte-identical across
clean builds. ``manifest.determinism`` says whether the backend's files are reproducible, and why.
"""

from __future__ import annotations

import json
import math
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from edgeopt.consumer.model import ConsumerCheck
from edgeopt.data import Preprocess
from edgeopt.errors import BadInputError
from edgeopt.files import file_sha256, write_text_atomic
from edgeopt.manifest_types import BackendSearchRow, PlanEntry, RuntimeEntry, StageEntry, VerifiedOn
from edgeopt.memory.fit import MemoryFit
from edgeopt.speed_claim_model import SpeedClaim
from edgeopt.validation_model import Validation

MANIFEST = "manifest.json"
BUILD = "build.json"
SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"


class TensorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[Any]
    dtype: str
    layout: str | None = None  # NCHW / NHWC for 4-D image-like inputs, else None
    preprocessing: Preprocess | None = None  # --preprocess: how an image file becomes this input


class SourceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    from_torch: str | None = None  # package.module:factory when exported from PyTorch
    weights: str | None = None


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    samples: int = 0
    synthetic: bool = False


class Determinism(BaseModel):
    """Whether the backend writes the same files from the same inputs, and why (None: not verified)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deterministic: bool | None
    why: str


class BackendLeft(BaseModel):
    """A backend of the profile tried before the one written, that couldn't hold the model: its exit code and
    the one-line reason (``backend_fallback``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    exit_code: int
    reason: str


class PrecisionFallback(BaseModel):
    """INT8 was asked for and held on no backend: the precision asked, why, and the exit code INT8 failed with;
    the manifest's ``precision`` is the float precision that held (``precision_fallback``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requested: str
    reason: str
    exit_code: int = 5


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)  # a field set later is typed like the rest

    edgeopt_version: str
    backend: str
    precision: str
    profile: str | None  # None: built for no profile (bench's ONNX Runtime FP32 reference)
    profile_requested: str | None = None  # the alias or family typed, when it was not the profile's name
    source_model: SourceModel
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    runtime: RuntimeEntry
    stages: list[StageEntry]
    versions: dict[str, str | None]
    files: dict[str, str] = {}
    validation: Validation | None = None  # the artifact against FP32 (edgeopt.validate); None: not validated
    calibration: Calibration
    plan_hash: str
    plan: PlanEntry
    warnings: list[str] = []
    created: str = ""
    determinism: Determinism | None = None
    build_facts: str | None = None  # BUILD when the artifact has one: volatile facts, not in ``files``
    backend_fallback: list[BackendLeft] = []  # backends of the profile tried first that couldn't hold the model
    backend_search: list[BackendSearchRow] = []  # --backend auto: each backend built, its figures, chosen or dropped and why
    precision_fallback: PrecisionFallback | None = None  # INT8 asked, none held; precision is what holds
    verified_on: VerifiedOn | None = None  # convert --verify-on: device, emulated, max_abs_diff, tolerance, passed
    memory: MemoryFit | None = None  # predicted peak memory against the profile's budget (edgeopt/memory/)
    consumer_check: ConsumerCheck | None = None  # the artifact through its runtime's plain API (edgeopt.consumer)
    speed_claim: SpeedClaim | None = None  # convert's speed-up: the search's estimate and the written artifact's


def guess_layout(shape) -> str | None:
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape):
        return None
    if shape[1] in (1, 3, 4) and shape[3] not in (1, 3, 4):
        return "NCHW"
    if shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4):
        return "NHWC"
    return None


def tensor_infos(specs, preprocessing: Preprocess | None = None) -> list[TensorInfo]:
    return [TensorInfo(name=t.name, shape=list(t.shape), dtype=t.dtype, layout=guess_layout(t.shape),
                       preprocessing=preprocessing) for t in specs]


def library_versions(backend: str, with_torch: bool = False) -> dict[str, str | None]:
    """The versions a manifest records: edgeopt, the core libraries, the backend's (and torch when it exported)."""
    from edgeopt import __version__
    from edgeopt.converters.registry import CORE_LIBRARIES, get_backend
    from edgeopt.deps import version_of

    backend_dists = tuple(d for _, d in get_backend(backend).libraries)
    dists = dict.fromkeys((*(d for _, d, _ in CORE_LIBRARIES), *backend_dists, *(("torch",) if with_torch else ())))
    return {"edgeopt": __version__, **{d: version_of(d) for d in dists}}


def build_manifest(*, backend: str, precision: str, profile: str | None, source: dict, inputs: list[TensorInfo],
                   outputs: list[TensorInfo], runtime: RuntimeEntry, plan_hash: str, plan: PlanEntry,
                   stages: list[StageEntry] | None = None, calibration: Calibration | None = None,
                   warnings: list[str] | None = None, with_torch: bool = False,
                   versions: dict[str, str | None] | None = None) -> Manifest:
    """The one builder of a :class:`Manifest` (``convert``, ``bench``'s FP32 reference): this edgeopt's version,
    the libraries' (``library_versions`` unless ``versions``), the source model (``source``: SourceModel's fields);
    not yet validated, not yet written (:func:`write_manifest` hashes the files)."""
    from edgeopt import __version__

    return Manifest(
        edgeopt_version=__version__, backend=backend, precision=precision, profile=profile,
        source_model=SourceModel(**source), inputs=inputs, outputs=outputs, runtime=runtime, stages=list(stages or []),
        versions=versions if versions is not None else library_versions(backend, with_torch),
        calibration=calibration or Calibration(), plan_hash=plan_hash, plan=plan, warnings=list(warnings or []),
    )


def determinism_of(backend: str) -> Determinism:
    from edgeopt.converters.registry import get_backend

    try:
        deterministic, why = get_backend(backend).deterministic
    except Exception:  # noqa: BLE001 - an unknown backend is simply not verified
        return Determinism(deterministic=None, why="not verified")
    return Determinism(deterministic=deterministic, why=why)


def created_now() -> str:
    """``$SOURCE_DATE_EPOCH`` (seconds since 1970, UTC) when set, else now; ISO 8601."""
    sde = os.environ.get(SOURCE_DATE_EPOCH, "").strip()
    if sde:
        try:
            when = datetime.fromtimestamp(int(sde), timezone.utc)
        except (ValueError, OverflowError, OSError) as err:
            raise BadInputError(f"{SOURCE_DATE_EPOCH}={sde!r} is not a whole number of seconds since 1970",
                                "unset it or set it to e.g. 0 or $(git log -1 --format=%ct)") from err
    else:
        when = datetime.now(timezone.utc)
    return when.isoformat(timespec="seconds")


def hash_files(directory: Path) -> dict[str, str]:
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.relative_to(directory).as_posix() not in (MANIFEST, BUILD, BUILD + ".tmp"):
            out[p.relative_to(directory).as_posix()] = file_sha256(p)
    return out


def _finite(obj):
    """Strict JSON: non-finite floats (an inf error, a NaN output) become the strings 'inf'/'nan'."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _timings(obj) -> tuple:
    """(obj without its ``*seconds`` keys, those keys in the same nesting or None)."""
    if isinstance(obj, dict):
        kept, moved = {}, {}
        for k, v in obj.items():
            if str(k).endswith("seconds") and isinstance(v, (int, float)):
                moved[k] = v
                continue
            kept[k], sub = _timings(v)
            if sub is not None:
                moved[k] = sub
        return kept, (moved or None)
    if isinstance(obj, list):
        pairs = [_timings(v) for v in obj]
        return [p[0] for p in pairs], ([p[1] or {} for p in pairs] if any(p[1] for p in pairs) else None)
    return obj, None


def _merge(base, extra):
    if isinstance(base, dict) and isinstance(extra, dict):
        out = dict(base)
        for k, v in extra.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(extra, list) and len(base) == len(extra):
        return [_merge(b, e) for b, e in zip(base, extra, strict=True)]
    return base


def split_volatile(manifest: dict) -> tuple[dict, dict]:
    """(the manifest's stable part, its timings): ``stages[].seconds``, the ``*seconds`` keys of
    ``stages[].report`` and of ``validation`` (a stage's ``config`` is an input: it stays)."""
    stable, timings = dict(manifest), {}
    stages, stage_timings = [], []
    for st in stable.get("stages") or []:
        st = dict(st)
        moved = {"seconds": st.pop("seconds")} if isinstance(st.get("seconds"), (int, float)) else {}
        if "report" in st:
            st["report"], rep = _timings(st["report"])
            if rep is not None:
                moved["report"] = rep
        stages.append(st)
        stage_timings.append(moved)
    if any(stage_timings):
        stable["stages"], timings["stages"] = stages, stage_timings
    if stable.get("validation") is not None:
        stable["validation"], moved = _timings(stable["validation"])
        if moved is not None:
            timings["validation"] = moved
    return stable, timings


def _write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(_finite(data), indent=2, allow_nan=False) + "\n")


def build_facts(timings: dict) -> dict:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"note": f"facts of this one build; they vary between builds, so {BUILD} is not in the manifest's files",
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
            "load_avg": load, "timings": timings}


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Hash the directory's files into ``manifest.files``; write ``manifest.json`` (stable) and
    ``build.json`` (the timings and build host), atomically. Returns the full manifest (timings in)."""
    manifest = manifest.model_copy(update={"files": hash_files(directory), "build_facts": BUILD})
    if not manifest.created:
        manifest = manifest.model_copy(update={"created": created_now()})
    if manifest.determinism is None:
        manifest = manifest.model_copy(update={"determinism": determinism_of(manifest.backend)})
    stable, timings = split_volatile(manifest.model_dump(mode="json"))
    _write_json(directory / BUILD, build_facts(timings))
    _write_json(directory / MANIFEST, stable)
    return manifest


def read_build_facts(directory: str | Path) -> dict | None:
    """The artifact's ``build.json``, or None (absent or unreadable: it is informative only)."""
    p = Path(directory) / BUILD
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_artifact(directory: str | Path, *, verify: bool = True) -> Manifest:
    """Read an artifact's manifest; with ``verify``, every listed file must exist with its sha256."""
    d = Path(directory)
    mf = d / MANIFEST
    if not mf.is_file():
        raise BadInputError(f"'{d}' is not an edgeopt artifact (no {MANIFEST})", "pass the directory 'edgeopt convert -o' wrote")
    try:
        data = json.loads(mf.read_text())
        facts = read_build_facts(d) if data.get("build_facts") else None
        if facts and isinstance(facts.get("timings"), dict):
            data = _merge(data, facts["timings"])
        manifest = Manifest.model_validate(data)
    except Exception as err:  # noqa: BLE001 - JSON or schema errors read the same to a user
        raise BadInputError(f"{mf}: unreadable manifest ({type(err).__name__})", "re-run edgeopt convert") from err
    if verify:
        verify_files(d, manifest.files)
    return manifest


def verify_files(directory: str | Path, files: dict[str, str], *, hashes: dict[str, str | None] | None = None,
                 where: str | None = None) -> None:
    """Every file the manifest lists exists with its sha256 (``hashes``: digests computed elsewhere, e.g.
    on a device, by the same names); else exit 3 naming the first file that differs."""
    d = Path(directory)
    at = where or f"artifact '{d}'"
    for name, digest in sorted(files.items()):
        if hashes is not None:
            got = hashes.get(name)
        else:
            p = d / name
            got = file_sha256(p) if p.is_file() else None
        if got is None:
            raise BadInputError(f"{at}: file '{name}' is missing", "re-run edgeopt convert")
        if got != digest:
            raise BadInputError(f"{at}: file '{name}' was changed after conversion (sha256 mismatch)",
                                "re-run edgeopt convert")


def verify_artifact(directory: str | Path) -> dict:
    """The manifest's ``files`` after checking each against its sha256 (before a measurement): the raw
    manifest is read, not validated as a schema, so a runner-only artifact is checked the same way."""
    d = Path(directory)
    try:
        data = json.loads((d / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}  # not an artifact at all: the caller's loader says so in its own words
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    files = {str(k): str(v) for k, v in files.items()}
    verify_files(d, files)
    return files
