"""Stage ``early_exit``: exits added to a trained classifier (``--early-exit auto``).

The model is cut at tensors that end blocks (:mod:`.cuts`, placed near 25/50/75 % of its measured time), each cut
gets a head (global average pool + linear) distilled from the model's own softmax on the unlabeled ``--calib``
data (:mod:`.heads`), and each exit's confidence threshold is chosen on the search half of ``--eval`` within the
bound, judged as the held-back half that confirms them will judge them (:mod:`.thresholds`). Exits that do not pay
for their heads (measured stage and head times) are dropped; where none pays, the plain model goes on to the backend and the run says why. Where
exits pay, the backend converts each stage (with its head) as a model of its own (:mod:`.staged`), and
``cascade.json`` says their order and thresholds.
"""

from __future__ import annotations

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import (
    ChainContext,
    ChainOptions,
    Intermediate,
    RunFacts,
    Stage,
    StageConfig,
    user_option,
)
from edgeopt.converters.registry import register_stage
from edgeopt.enums import BackendName, CutCost, EarlyExitMode
from edgeopt.errors import UsageError

DEFAULT_DROP = 1.0  # points, where --max-accuracy-drop is not given
MIN_EVAL = 20  # samples of --eval: half to choose thresholds on, half to confirm them


class EarlyExitConfig(StageConfig):
    early_exit: EarlyExitMode = user_option(
        EarlyExitMode.OFF, "off | auto: add early exits to a classifier (heads distilled on --calib, thresholds "
        "chosen on --eval within --max-accuracy-drop); written only where they lower the mean latency.")
    exit_confidence: float | None = user_option(
        None, "Bound the cascade's disagreement with the full model by its Clopper-Pearson upper bound at this "
        "confidence (e.g. 0.95) instead of the count seen.", gt=0.0, lt=1.0)
    exit_max_disagreement: float | None = user_option(
        None, "Most points of samples on which the cascade's class may differ from the full model's (default: "
        "twice --max-accuracy-drop).", ge=0.0)
    bound: AccuracyBound = AccuracyBound()
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75)  # where the candidate exits sit, of the measured time
    cuts_by: CutCost = CutCost.BY_BACKEND  # whose costs place the cuts (:mod:`.prefix_cost`)
    backend: BackendName | None = None  # the plan's backend: its costs place the cuts
    profile: str | None = None  # the plan's profile: the cost model's unit where the backend can't be timed here
    epochs: int = 300  # full-batch training steps of each head
    # where the backend quantizes the stages after the thresholds are chosen on the float stages (OpenVINO, TFLite),
    # the search half is held to this share of the bound: INT8 moves the exits' confidences, which the float
    # stages don't show (a model quantized before the cut, ONNX Runtime's QDQ, is judged as it is)
    int8_later_aim: float = 0.5
    int8: bool = False  # from --precision: the run writes INT8
    min_gain: float = 0.05  # the predicted mean latency must be at least this share below the plain model's
    # share of the plain model's time each kept exit is charged when the exits are chosen: a stage call costs more
    # in LiteRT or OpenVINO than in ONNX Runtime, and the stage costs leave the calls out, so an exit that saves less
    # (one a few samples take) is left out
    exit_cost: float = 0.03
    timing_runs: int = 30  # runs per timed model (median)
    seed: int = 0

    def drop(self) -> float:
        d = self.bound.max_accuracy_drop
        return DEFAULT_DROP if d is None else d

    def max_disagreement(self) -> float:
        return self.exit_max_disagreement if self.exit_max_disagreement is not None else 2 * self.drop()


@register_stage
class EarlyExitStage(Stage):
    name = "early_exit"
    Config = EarlyExitConfig

    @classmethod
    def configure(cls, options: ChainOptions) -> EarlyExitConfig | None:
        from edgeopt.enums import Precision

        config = EarlyExitConfig(**{"int8": options.precision == Precision.INT8, "backend": options.backend,
                                    "profile": options.profile_name, **options.for_config(EarlyExitConfig)})
        if config.early_exit == EarlyExitMode.OFF:
            return None
        return config

    @classmethod
    def check_before_work(cls, config: EarlyExitConfig, facts: RunFacts) -> None:
        from edgeopt.converters.early_exit.classifier import classifier_output_of

        if facts.outputs:
            classifier_output_of(list(facts.outputs), strict=False)

    def run(self, model: Intermediate, config: EarlyExitConfig, ctx: ChainContext) -> Intermediate:
        from edgeopt.converters.early_exit.build import build_cascade

        if ctx.calib is None or len(ctx.calib) == 0:
            raise UsageError("--early-exit auto needs --calib: unlabeled samples the exit heads are distilled on",
                             "give --calib DATA.npz (inputs like the model will see)")
        if ctx.eval is None or len(ctx.eval) < MIN_EVAL:
            raise UsageError(f"--early-exit auto needs --eval with at least {MIN_EVAL} samples: half chooses the "
                             "exit thresholds, half confirms them", "give --eval DATA.npz (labels optional)")
        return build_cascade(model, config, ctx)
