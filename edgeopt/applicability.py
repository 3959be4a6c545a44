"""Which flags apply to this run, checked once before any work.

``convert`` (and so ``optimize``'s builds) calls :func:`check_before_work` after the model and the data are
loaded and before the first stage; ``--dry-run`` calls the same function, so "doesn't apply", "refused early"
and "the dry run catches it" are one mechanism:

* every stage of the plan checks what it would refuse later (``Stage.check_before_work``: an integer input
  TFLite INT8 can't calibrate, too few ``--calib`` samples for ``--recover`` or ``--prune auto``);
* the metric flags (:func:`check_metric_flags`) against the output they would judge: ``--metric-axis`` names
  the class axis of ``[N,T,C]``/``[N,C,H,W]`` outputs, ``--ctc-blank`` is CTC's, ``--metric-threshold``
  the one-value decision's or the map's, ``--min-sqnr-db`` gates the SQNR. A flag that can't apply is exit 2
  naming the flag and what this run judges; never silently dropped. Once FP32 has run on the data (the
  metric is chosen), the same function checks the chosen metric.

The README's "What each flag applies to" is the user's table of these rules.
"""

from __future__ import annotations

from edgeopt.metrics.flags import check_metric_against_outputs, check_metric_flags, declared_kind

__all__ = ["check_before_work", "check_metric_against_outputs", "check_metric_flags", "declared_kind"]


def check_before_work(plan, facts) -> None:
    """Everything this run would refuse later that can be told from the plan, the model's inputs/outputs and
    the data (``facts``: a ``converters.base.RunFacts``): raises the same error the later step would."""
    from edgeopt.chain import stage_class

    check_metric_against_outputs(plan.options.bound.metric, facts.outputs)
    for stage in plan.stages:
        stage_class(stage.name, plan).check_before_work(stage.config, facts)
