"""The contract every chain stage and backend follows.

A stage takes an :class:`Intermediate` (a model file in the chain's work
directory, with its format) and returns a new one. A :class:`Backend` is the
last stage: it writes the artifact's files into ``ctx.artifact_dir`` and says
how the on-device runner should load them (``runtime`` entry of the manifest).

Every stage that changes numbers checks its output against its input on a few
samples (``ctx.check_samples``) and records what it found in ``StageRecord.checks``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.enums import BackendName, Format, Precision, QuantMode, StrEnum


class StageConfig(BaseModel):
    """Base of every stage's typed config: frozen, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def user_option(default: Any, description: str, *, name: str | None = None, **checks: Any) -> Any:
    """A stage config field that is also a user option: ``--name`` on the command line, ``name:`` in a recipe, a
    keyword of the API. This field is the option's one declaration (type, default, checks, description):
    :class:`edgeopt.options.ChainRequest` and the CLI flags are generated from it. ``name``: the option's name
    where it differs from the field's (``budget_s`` is ``--recover-budget``)."""
    return Field(default=default, description=description, json_schema_extra={"option": name or "", "declares": True},
                 **checks)


def from_option(name: str, default: Any = None, **checks: Any) -> Any:
    """A stage config field the planner fills from a user option declared elsewhere (a chain-level option such as
    ``threads``, or another stage's, such as ``per_channel``): no description here, the declaration has it."""
    return Field(default=default, json_schema_extra={"option": name, "declares": False}, **checks)


def option_name(field_name: str, info: Any) -> str | None:
    """The user option a config field declares or takes (None: a field only a recipe's ``stages:`` reaches)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "option" not in extra:
        return None
    return str(extra["option"] or field_name)


def options_for(config_cls: type[StageConfig], given: dict[str, Any]) -> dict[str, Any]:
    """The options the user gave (``ChainOptions.given``, by option name) that ``config_cls`` declares or takes,
    by its field names: what ``configure`` passes on, so a value not given keeps the declaration's default."""
    out = {}
    for field_name, info in config_cls.model_fields.items():
        name = option_name(field_name, info)
        if name is not None and given.get(name) is not None:
            out[field_name] = given[name]
    return out


class CalibMethod(StrEnum):
    MINMAX = "minmax"
    PERCENTILE = "percentile"


class PruneMode(StrEnum):
    CHANNELS = "channels"  # structured: whole output channels removed
    SPARSE_2_4 = "2:4"  # semi-structured: 2 of every 4 weights zeroed (sparse tensor cores)


class ChainOptions(StageConfig):
    """What the user asked for (:class:`edgeopt.options.ChainRequest`, where the options are declared), after
    ``make_plan`` applied the recipe and the profile's defaults: resolved values, no None for "not given".

    The planner asks each stage ``configure(options)`` for its typed config (or None to skip it);
    ``stage_overrides`` (from a recipe) then update that config, and unknown keys are errors.
    """

    backend: BackendName
    precision: Precision
    quant_mode: QuantMode = QuantMode.AUTO  # --quant-mode: the kind of 8-bit (converters/quantize/modes.py)
    prune: float = 0.0  # fraction of channels (mode channels) to remove
    prune_auto: bool = False  # --prune auto: the largest ratio within max_accuracy_drop (converters/prune_auto.py)
    prune_mode: PruneMode = PruneMode.CHANNELS
    # distil the pruned model from FP32 (converters/recover.py): None = when pruning channels and the train extra is installed
    recover: bool | None = None
    # (multiple, why): kept channel counts rounded to what the profile's unit for this backend likes (the planner's)
    prune_channel_multiple: tuple[int, str] = (1, "")
    bound: AccuracyBound = AccuracyBound()  # --max-accuracy-drop, --metric, --search-budget…: every searching stage's
    # the stage-declared options the user gave (by option name: per_channel, recover_budget…); each stage takes its
    # own with ``options_for`` and keeps its declaration's default for the others
    given: dict[str, Any] = {}
    threads: int | None = None
    backend_settings: dict[str, Any] = {}  # the profile's settings for this backend (target, device…)
    stage_overrides: dict[str, dict[str, Any]] = {}
    input_shapes: dict[str, tuple[int, ...]] = {}  # --input-shape: fixed by the normalize stage
    # (INT8 preset, why) for the profile's ISA, settled by the planner so the plan alone decides the artifact
    quant_preset: tuple[str | None, str | None] = (None, None)
    # facts of the profile that stages' warnings and hints name, settled by the planner like the two above
    # (None: not known, e.g. options made without a profile)
    profile_name: str | None = None
    profile_has_gpu: bool | None = None
    sparse_units: tuple[str, ...] | None = None  # the profile's units with 2:4 sparse tensor cores
    # the float precisions the profile's unit runs natively on the chosen backend (edgeopt.float_precisions)
    native_floats: tuple[str, ...] | None = None


@dataclass
class Intermediate:
    """What flows between stages: one model file and its format (plus side files)."""

    path: Path
    format: Format = Format.ONNX
    precision: Precision = Precision.FP32
    notes: dict[str, Any] = field(default_factory=dict)  # facts later stages or the manifest need


@dataclass
class StageRecord:
    name: str
    config: dict
    seconds: float = 0.0
    checks: dict[str, Any] = field(default_factory=dict)  # numeric check of output vs input
    report: dict[str, Any] = field(default_factory=dict)  # stage-specific figures (FLOPs, excluded layers…)


@dataclass
class ChainContext:
    """Everything a stage may need besides its config (never the profile: what a stage takes from
    it is settled in its config by ``configure``, so that the plan alone decides the artifact)."""

    work_dir: Path  # scratch space, deleted after the run
    artifact_dir: Path  # where a Backend writes its files (a temporary dir, renamed when complete)
    reference_model: Path  # the normalized FP32 ONNX model (the oracle)
    calib: Any = None  # edgeopt.data.Dataset or None
    eval: Any = None  # edgeopt.data.Dataset or None (with labels)
    check_samples: Any = None  # edgeopt.data.Dataset: a few held-out samples for stage checks
    threads: int | None = None
    metric_search_path: tuple[str, ...] = ()  # where a --metric MODULE:FUNCTION (in a stage's bound) is imported from
    warnings: list[str] = field(default_factory=list)
    progress: Any = None  # callable(description, total) -> context manager with .advance(); may be None
    record: StageRecord | None = None  # the running stage's record (stages add checks/report here)
    # the FP32 model a prune (and recover) stage made, set by the chain once one ran: a gate failure says what
    # pruning alone cost (converters/prune_blame.py); None: nothing pruned
    pruned_model: Path | None = None

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def reference_for(self, stage_input) -> Path:
        """The FP32 model every accuracy search measures against and chooses its metric from: the user's model as
        normalized (``reference_model``), never a pruning stage's output, which is the quantizer's input
        (``stage_input``: used only where no reference file with the same inputs and outputs is set, e.g. a stage
        run on its own)."""
        ref = Path(self.reference_model) if self.reference_model else None
        return ref if ref is not None and ref.is_file() and _same_io(ref, Path(stage_input)) else Path(stage_input)

    def stage_report(self) -> dict:
        """The running stage's report to add facts to (a throwaway dict when no stage is recorded)."""
        return self.record.report if self.record is not None else {}

    def record_checks(self, checks: dict) -> dict:
        """Keep a stage's numeric comparison with its input on the stage's record; returns ``checks``."""
        if self.record is not None:
            self.record.checks.update(checks)
        return checks


def _same_io(a: Path, b: Path) -> bool:
    """Whether two ONNX files name the same graph inputs and outputs (weights not read)."""
    import onnx

    def names(p: Path) -> tuple:
        g = onnx.load(str(p), load_external_data=False).graph
        inits = {t.name for t in g.initializer}
        return tuple(i.name for i in g.input if i.name not in inits), tuple(o.name for o in g.output)

    return a == b or names(a) == names(b)


@dataclass(frozen=True)
class RunFacts:
    """What is known before the first stage runs (and in ``--dry-run``): the model's inputs and outputs at the
    run's shapes (``edgeopt.model.TensorSpec``) and the calibration set the stages will get (None when none;
    ``synthetic`` when INT8 made one up)."""

    inputs: tuple = ()
    outputs: tuple = ()
    calib: Any = None


class Stage(ABC):
    """One step of the chain. Subclasses declare ``name``, ``Config``, ``accepts`` and ``produces``."""

    name: ClassVar[str]
    Config: ClassVar[type[StageConfig]]
    accepts: ClassVar[tuple[Format, ...]] = (Format.ONNX,)
    produces: ClassVar[Format] = Format.ONNX

    @classmethod
    def configure(cls, options: ChainOptions) -> StageConfig | None:
        """This stage's config for ``options``, or None when the stage is not needed."""
        return cls.Config()

    @classmethod
    def check_before_work(cls, config: StageConfig, facts: RunFacts) -> None:
        """Raise now what ``run`` would refuse later for these inputs or this data (an integer input it can't
        take, too few calibration samples): ``edgeopt.applicability`` calls it for every stage of the plan
        before the first runs, and ``--dry-run`` does too. ``run`` calls the same check."""
        return None

    @abstractmethod
    def run(self, model: Intermediate, config: StageConfig, ctx: ChainContext) -> Intermediate: ...


class Backend(Stage):
    """The last stage: writes the artifact's model files and runtime settings."""

    backend: ClassVar[BackendName]
    extra: ClassVar[str | None] = None  # the pip extra that installs it
    # True when the backend quantizes to INT8 itself (NNCF, onnx2tf); False when it needs the
    # chain's QDQ quantize stage before it (ONNX Runtime, TVM).
    quantizes_itself: ClassVar[bool] = False
    precisions: ClassVar[tuple[Precision, ...]] = (Precision.FP32, Precision.INT8)
    # import names the backend needs (checked with find_spec by ``available``, nothing imported)
    requires: ClassVar[tuple[str, ...]] = ()
    # The rest of the backend's descriptor, read by every table that is keyed by backend (through
    # ``edgeopt.converters.registry``), so that adding a backend is its module, its runner and one registry line.
    # (import name, distribution) of each library converting to or running it: versions in the manifest and the
    # cache keys, rows of ``edgeopt doctor``
    libraries: ClassVar[tuple[tuple[str, str], ...]] = ()
    # what the on-device runner imports, and the pip requirement that installs it (``remote-bench --setup``)
    device_runtime: ClassVar[tuple[str, str] | None] = None
    # whether its artifact files are byte-identical across clean builds with the same inputs, and why (not)
    deterministic: ClassVar[tuple[bool | None, str]] = (None, "not verified")
    # "module:function" references, imported only when used: the pre-flight op check
    # ``(onnx model, BackendTarget) -> [PreflightIssue]`` and the per-op profiler of an artifact
    preflight_check: ClassVar[str | None] = None
    per_layer_profiler: ClassVar[str | None] = None
    # "module:function" ``(measured rows, roofline rows) -> (matched_by, how)`` giving each measured row its ONNX
    # node (``onnx_node``) where the profiler's names are not the ONNX nodes'; None: matched by name
    per_layer_matcher: ClassVar[str | None] = None
    # "module:function" ``(threads) -> (ONNX path -> run function, what runs it) | None``: a stage's quick timing
    # of an ONNX file on this backend before the artifact exists (prune's estimate); None: ONNX Runtime stands in
    onnx_timer: ClassVar[str | None] = None
    # True when only a tuned build pays (TVM: untuned it is slower than the others): never a fallback for another
    # backend, nor a candidate of ``--backend auto``; it is built when named
    pays_only_tuned: ClassVar[bool] = False
    # "module:Class" of its 8-bit quantizer (a ``converters.quantize.modes.Quantizer``: the modes it offers and
    # how it quantizes one model file in one mode), imported only when used; None: it does not quantize
    quantizer: ClassVar[str | None] = None
    # "module:attribute" of its ``converters.hooks.BackendHooks`` (doctor rows, host entry, unit counts, as-loaded
    # graph, placement); None: the defaults
    hooks: ClassVar[str | None] = None

    @classmethod
    def available(cls) -> bool:
        """Whether the backend's libraries import here (cheap check, no heavy import)."""
        import importlib.util

        for module in cls.requires:
            try:
                if importlib.util.find_spec(module) is None:
                    return False
            except (ImportError, ValueError):
                return False
        return True

    @abstractmethod
    def run(self, model: Intermediate, config: StageConfig, ctx: ChainContext) -> Intermediate:
        """Write files into ``ctx.artifact_dir``; return an Intermediate whose ``notes['runtime']``
        is the manifest's ``runtime`` entry (backend name, model file, settings, io map)."""
