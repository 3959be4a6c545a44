"""The prune stage's typed configs: channel pruning (a fixed ratio, or ``--prune auto``'s search) and 2:4
semi-structured sparsity, with what the plan says about 2:4."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import PruneMode, StageConfig, from_option
from edgeopt.converters.recover import RecoverConfig
from edgeopt.enums import StrEnum
from edgeopt.runtime.reference import REFERENCE


class PruneCriterion(StrEnum):
    # L1 norm of each output filter, scaled by a following BN's |gamma|/sqrt(var+eps): the norm of the filter as
    # BN folding would leave it, so the choice is the same whether or not normalize folded BN first
    L1 = "l1"


class PruneConfig(StageConfig):
    mode: PruneMode = from_option("prune_mode")
    ratio: float = Field(default=0.0, ge=0.0, lt=1.0)  # fraction of output channels removed per prunable Conv
    criterion: PruneCriterion = PruneCriterion.L1
    min_channels: int = Field(default=4, ge=1)  # never keep fewer channels than this
    round_to: int = Field(default=1, ge=1)  # kept channel counts rounded up to a multiple (SIMD width)
    round_to_reason: str = ""  # why the planner chose round_to from the profile (see channel_multiple)
    # 2:4 only, the planner's: the profile's units with sparse tensor cores (None: not known) and its name
    sparse_units: tuple[str, ...] | None = None
    profile_name: str | None = None
    # add the mean contribution of removed input channels (measured on ctx.calib) to each consumer's bias
    bias_compensation: bool = True
    calib_samples: int = Field(default=64, ge=1)
    skip: tuple[str, ...] = ()  # Conv names whose output channels stay (with every Conv sharing their mask)
    # --prune auto (converters/prune_auto.py): the largest ratio of auto_ratios whose recovered student stays
    # within bound.max_accuracy_drop of FP32 (bound.metric) on calibration data held back from pruning and recovery,
    # the whole search within bound.search_budget (--search-budget)
    auto: bool = False
    auto_ratios: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
    bound: AccuracyBound = AccuracyBound()  # the planner's: --max-accuracy-drop, --metric, --search-budget
    auto_holdout: float = Field(default=0.2, gt=0, lt=1)  # share of --calib that judges the candidates
    auto_recover: bool = True  # recover each candidate (False: --no-recover, judged as pruned)
    # the recover stage's planned config (its recipe overrides included) each candidate is distilled with, its
    # budget_s replaced by the candidate's share of bound.search_budget; the planner sets it (edgeopt/plan.py), so
    # --dry-run shows it and the plan hash covers it. None: the recover defaults with this config's seed
    auto_recover_config: RecoverConfig | None = None
    latency_backend: str = REFERENCE  # the plan's backend: the pruned-vs-unpruned timing runs on it if it can
    seed: int = 0


SPARSE_2_4_ZEROES = "2 of every 4 weights along each layer's reduction axis, the 2 smallest by magnitude"


SPARSE_2_4_WARNING = (
    "prune 2:4: half of the covered weights are zeroed by magnitude with no fine-tuning, which loses accuracy "
    "(NVIDIA's recipe prunes to 2:4, then fine-tunes with the mask fixed); --recover does not fine-tune 2:4 "
    "models (it distils channel-pruned ones only): judge the result with --eval and --max-accuracy-drop, or drop "
    "--prune-mode 2:4")


class Sparse24Config(StageConfig):
    """The prune stage in 2:4 mode, as the plan shows it: what is zeroed and that nothing fine-tunes it
    (2:4 runs only when asked for: ``--prune-mode 2:4`` or ``prune_mode: 2:4`` in a recipe)."""

    mode: Literal[PruneMode.SPARSE_2_4] = PruneMode.SPARSE_2_4
    zeroes: str = SPARSE_2_4_ZEROES
    fine_tuned: Literal[False] = False  # no stage fine-tunes a 2:4 model (recover distils channel pruning only)
    skip: tuple[str, ...] = ()  # layer names left dense
    # the planner's: the profile's units with sparse tensor cores (None: not known) and its name
    sparse_units: tuple[str, ...] | None = None
    profile_name: str | None = None
