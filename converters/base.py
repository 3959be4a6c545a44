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
from typing import Annotated, Any, ClassVar, Literal

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


def from_option(name: str, default: Any = ..., **checks: Any) -> Any:
    """A stage config field the planner fills from a user option declared elsewhere (a chain-level option such as
    ``threads``, or another stage's, such as ``per_channel``): no description here, the declaration has it. Without
    ``default``, a chain-level option's field takes the declaration's default (``quant_mode``: auto), another's None."""
    if default is ...:
        declared = ChainOptions.model_fields.get(name)
        default = declared.default if declared is not None and is_chain_option(declared) else None
    return Field(default=default, json_schema_extra={"option": name, "declares": False}, **checks)


def chain_option(default: Any, description: str, **checks: Any) -> Any:
    """A chain-level option (it chooses the plan's stages and backend, so no one stage declares it): a field of
    :class:`ChainOptions` and its one declaration (type, default, checks, description). The request
    (:class:`edgeopt.options.ChainRequest`, where None is "not given") and the CLI flags are generated from it; the
    request's type is the field's unless ``ChainOptions.asked_as`` names the one the user asks in (``auto``)."""
    return Field(default, description=description, json_schema_extra={"chain": True}, **checks)


def is_chain_option(info: Any) -> bool:
    """Whether a field is a chain-level option's declaration (:func:`chain_option`)."""
    return isinstance(info.json_schema_extra, dict) and bool(info.json_schema_extra.get("chain"))


def option_name(field_name: str, info: Any) -> str | None:
    """The user option a config field declares or takes (None: a field only a recipe's ``stages:`` reaches)."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "option" not in extra:
        return None
    return str(extra["option"] or field_name)


class CalibMethod(StrEnum):
    MINMAX = "minmax"
    PERCENTILE = "percentile"


class PruneMode(StrEnum):
    CHANNELS = "channels"  # structured: whole output channels removed
    SPARSE_2_4 = "2:4"  # semi-structured: 2 of every 4 weights zeroed (sparse tensor cores)


class ChainOptions(StageConfig):
    """The chain options as the planner resolved them: what each stage's ``configure(options)`` reads.

    The fields made with :func:`chain_option` are the chain-level options' one declaration (``--backend``,
    ``--precision``, ``--quant-mode``…: :class:`edgeopt.options.ChainRequest` and the flags are generated from them);
    ``make_plan`` fills them from the request over the recipe, a value not given from the profile (backend,
    precision, prune) or the declaration's default. The other fields are what the planner settles for the stages
    (the bound, the stage options given, the profile's facts), so that the plan alone decides the artifact.
    ``stages`` (a recipe's per-stage overrides) then update each stage's config; unknown keys are errors.
    """

    backend: BackendName = chain_option(
        ..., "onnxruntime | openvino | tflite | tvm (default: the profile's first installed), or auto: on the host "
        "profile, build with each installed backend and keep the fastest that holds.")
    precision: Precision = chain_option(
        ..., "int8 | bf16 | fp16 | fp32 (default: the profile's; bf16 where the CPU has AMX/AVX512-BF16).")
    quant_mode: QuantMode = chain_option(
        QuantMode.AUTO, "static | dynamic | weights | auto: the kind of INT8 (auto, the default: with "
        "--max-accuracy-drop the fastest that fits the graph and holds the bound).")
    prune: float = chain_option(
        0.0, "Fraction of channels to remove (0-1), or 'auto': the largest ratio whose recovered model stays within "
        "--max-accuracy-drop (needs it and --calib).")
    prune_mode: PruneMode = chain_option(
        PruneMode.CHANNELS, "channels | 2:4 (2:4 zeroes 2 of every 4 weights for sparse tensor cores; only when "
        "asked for).")
    # None: when pruning channels and the train extra is installed (converters/recover.py)
    recover: bool | None = chain_option(
        None, "Distil the pruned model from FP32 on --calib (default: when the train extra is installed).")
    threads: int | None = chain_option(None, "Runtime threads (and the searches').", gt=0)
    stages: dict[str, dict[str, Any]] = chain_option(
        {}, "Per-stage config overrides, {qdq: {calib_samples: 64}, ...}; on the command line --set "
        "STAGE.FIELD=VALUE.")
    # what the user asks in, where it is not the resolved type: the request's type of these chain-level options
    asked_as: ClassVar[dict[str, Any]] = {
        "backend": str,  # a name (any case) or auto, chosen by edgeopt/backend_choice.py
        "prune": Annotated[float, Field(ge=0.0, lt=1.0)] | Literal["auto"],  # resolved to prune and prune_auto
    }

    prune_auto: bool = False  # --prune auto: the largest ratio within max_accuracy_drop (converters/prune_auto.py)
    # (multiple, why): kept channel counts rounded to what the profile's unit for this backend likes (the planner's)
    prune_channel_multiple: tuple[int, str] = (1, "")
    bound: AccuracyBound = AccuracyBound()  # --max-accuracy-drop, --metric, --search-budget…: every searching stage's
    # the stage-declared options the user gave (by option name: per_channel, recover_budget…); each stage takes its
    # own with ``for_config`` and keeps its declaration's default for the others
    given: dict[str, Any] = {}
    backend_settings: dict[str, Any] = {}  # the profile's settings for this backend (target, device…)
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

    def for_config(self, config_cls: type[StageConfig]) -> dict[str, Any]:
        """The fields of ``config_cls`` these options fill, by its field names: a field that takes an option
        (``from_option``, ``user_option``) gets the chain-level value (``quant_mode``, ``precision``…) or the stage
        option the user gave (``per_channel``…), a field of type :class:`AccuracyBound` the bound. An option with no
        value (None: not given) is left out, so the field keeps its declaration's default."""
        out: dict[str, Any] = {}
        for field_name, info in config_cls.model_fields.items():
            name = option_name(field_name, info)
            if info.annotation is AccuracyBound:
                out[field_name] = self.bound
            elif name is not None:
                value = getattr(self, name) if name in type(self).model_fields else self.given.get(name)
                if value is not None:
                    out[field_name] = value
        return out


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


def _looks():
    from edgeopt.metrics.confidence import Looks

    return Looks()


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
    # the run's looks at the held-back part of --eval, shared by every search of every backend tried
    # (edgeopt.metrics.confidence.Looks; convert passes one per run)
    held_back_looks: Any = field(default_factory=_looks)

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
    # chain's Q/DQ stage (qdq) before it (ONNX Runtime, TVM).
    quantizes_itself: ClassVar[bool] = False
    precisions: ClassVar[tuple[Precision, ...]] = (Precision.FP32, Precision.INT8)
    # import names the backend needs (checked with find_spec by ``available``, nothing imported)
    requires: ClassVar[tuple[str, ...]] = ()
    # The rest of the backend's descriptor, read by every table that is keyed by backend (through
    # ``edgeopt.converters.registry``), so that adding a backend is its module, its runner and one registry line.
    # (import name, distribution) of each library converting to or running it: versions in the manifest and the
    # cache keys, rows of ``edgeopt doctor``
    libraries: ClassVar[tuple[tuple[str, str], ...]] = ()
    # (import name, distribution, extra) of libraries only some of its targets use, installed by an extra of their own
    other_libraries: ClassVar[tuple[tuple[str, str, str | None], ...]] = ()
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
