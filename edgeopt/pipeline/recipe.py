"""The ``edgeopt.yaml`` recipe of a firmware build: one model, its data, targets and gates.

Paths in the file are relative to the file itself. Unknown keys are errors (exit 3) with a
"did you mean" hint, like device profiles; duplicate keys are errors too.

    version: 1
    model: {path: model.onnx, inputs: {input: [1, 1, 28, 28]}, preprocess: null}
    data: {calib: data/calib.npz, eval: data/test.npz}
    output: dist
    gates: {max_accuracy_drop: 1.0, max_p99_latency_ms: 5, max_artifact_kb: 200, max_ram_mb: 64}
    targets:
      - {name: host-ort-int8, profile: host, backend: onnxruntime, precision: int8}
      - {name: host-ov-int8, profile: host, backend: openvino, precision: int8, gates: {max_artifact_kb: 100}}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from edgeopt.enums import StrEnum
from edgeopt.errors import BadInputError, did_you_mean
from edgeopt.files import read_text_file
from edgeopt.metrics.base import MetricSpec
from edgeopt.options import ChainRequest

RECIPE_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class LatencySource(StrEnum):
    MEASURED = "measured"  # the local benchmark's p99 (needs --bench local)
    ESTIMATED = "estimated"  # the roofline estimate of edgeopt analyze (no percentiles: labelled)
    AUTO = "auto"  # measured when benchmarked, else estimated


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    path: str | None = None  # ONNX file, relative to the recipe
    from_torch: str | None = None  # package.module:factory building a torch.nn.Module
    weights: str | None = None  # state dict for from_torch
    inputs: dict[str, list[int]] = {}  # input name -> static shape
    preprocess: str | dict[str, Any] | None = None  # as --preprocess: KEY=VALUE list, a mapping, or a YAML file

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if bool(self.path) == bool(self.from_torch):
            raise ValueError("give exactly one of 'path' or 'from_torch'")
        return self


class DataSpec(_Strict):
    calib: str | None = None  # .npz named after the inputs, or an image folder
    eval: str | None = None  # .npz with 'labels', or class sub-folders


class Gates(_Strict):
    # the bound's own declaration (type, check, default), a gate here: points of the task metric
    max_accuracy_drop: float | None = ChainRequest.model_fields["max_accuracy_drop"]
    max_p99_latency_ms: float | None = Field(default=None, gt=0)
    latency_source: LatencySource = LatencySource.AUTO
    max_artifact_kb: float | None = Field(default=None, gt=0)  # sum of the artifact's files, KiB
    max_ram_mb: float | None = Field(default=None, gt=0)  # measured: RSS growth at load; estimated: params + peak activations

    def merged(self, override: Gates | None) -> Gates:
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_unset=True))


class Target(ChainRequest):
    """One build: a name, a profile, gate overrides, and the chain options (:class:`edgeopt.options.ChainRequest`,
    generated from their declarations: backend, precision, prune, recover, calib_method, threads,
    metric, stages...). ``max_accuracy_drop`` given here is the target's own quantization target and gate;
    ``accuracy_aware`` makes the gates' ``max_accuracy_drop`` that target instead."""

    name: str
    profile: str = "host"  # a profile name or a YAML file (relative to the recipe)
    accuracy_aware: bool = False  # quantize accuracy-aware with the gate's max_accuracy_drop
    gates: Gates | None = None  # overrides of the recipe's gates for this target

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("a target name is letters, digits, '.', '_' or '-' (it names files in dist/)")
        return v


class BenchSpec(_Strict):
    warmup: int = Field(default=5, ge=0)
    min_runs: int = Field(default=30, gt=0)
    min_seconds: float = Field(default=0.5, ge=0)
    threads: int | None = Field(default=None, gt=0)


class PipelineRecipe(_Strict):
    version: int = RECIPE_VERSION
    model: ModelSpec
    data: DataSpec = DataSpec()
    output: str = "dist"  # relative to the recipe
    gates: Gates = Gates()
    metric: MetricSpec | None = None  # every target's task metric unless the target names its own
    bench: BenchSpec = BenchSpec()
    targets: list[Target] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> PipelineRecipe:
        names = [t.name for t in self.targets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"target names must be unique ({', '.join(dup)} repeated)")
        if self.version != RECIPE_VERSION:
            raise ValueError(f"recipe version {self.version} is not supported (this edgeopt reads {RECIPE_VERSION})")
        return self


class LoadedRecipe(BaseModel):
    """A recipe with the directory its relative paths start from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    recipe: PipelineRecipe
    path: Path
    base: Path

    def resolve(self, p: str | None) -> Path | None:
        if p is None:
            return None
        q = Path(p).expanduser()
        return q if q.is_absolute() else (self.base / q)


# --------------------------------------------------------------------------- errors


def _model_at(loc: tuple) -> type[BaseModel]:
    from edgeopt.profiles import model_at

    return model_at(loc, PipelineRecipe)


def describe_error(err: ValidationError, origin: str) -> BadInputError:
    """One line for the most useful problem: unknown keys first, with "did you mean"."""
    from edgeopt.profiles import format_loc

    errors = sorted(err.errors(), key=lambda e: {"extra_forbidden": 0, "missing": 2}.get(e["type"], 1))
    first = errors[0]
    loc = tuple(first["loc"])
    where = format_loc(loc)
    details = {"path": where, "problems": [{"path": format_loc(tuple(e["loc"])), "message": e["msg"]} for e in errors]}
    if first["type"] == "extra_forbidden":
        key = str(loc[-1])
        fields = list(_model_at(loc).model_fields)
        return BadInputError(f"{origin}: unknown key '{where}'",
                             did_you_mean(key, fields) or f"known keys here: {', '.join(fields)}", details=details)
    if first["type"] == "missing":
        return BadInputError(f"{origin}: missing key '{where}'", "add it; 'edgeopt pipeline init MODEL' writes a starter file",
                             details=details)
    msg = str(first["msg"]).removeprefix("Value error, ")
    return BadInputError(f"{origin}: '{where}': {msg}", "fix the value", details=details)


def parse_recipe(data: Any, origin: str) -> PipelineRecipe:
    if not isinstance(data, dict):
        raise BadInputError(f"{origin}: a pipeline recipe must be a YAML mapping", "see examples/edgeopt.yaml")
    # a section whose keys are all commented out reads as null: the same as leaving it out
    data = {k: v for k, v in data.items() if not (v is None and k in ("data", "gates", "bench"))}
    try:
        return PipelineRecipe.model_validate(data)
    except ValidationError as err:
        raise describe_error(err, origin) from err


def load_pipeline_recipe(path: str | Path) -> LoadedRecipe:
    """Read and check ``edgeopt.yaml`` (exit 3 with a one-line reason when it is wrong)."""
    from edgeopt.errors import EdgeoptError
    from edgeopt.profiles import read_yaml

    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"recipe file '{p}' not found", "write one with: edgeopt pipeline init MODEL")
    try:
        data = read_yaml(read_text_file(p, "recipe file"), str(p))
    except EdgeoptError as err:  # a BadProfileError from the shared YAML reader: same exit code, neutral kind
        raise BadInputError(err.message, "fix the YAML") from err
    recipe = parse_recipe(data, str(p))
    return LoadedRecipe(recipe=recipe, path=p.resolve(), base=p.resolve().parent)
