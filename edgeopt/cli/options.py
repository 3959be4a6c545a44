"""Options that several verbs share (declared once, so their names, checks and help agree)."""

from __future__ import annotations

import typer

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.errors import UsageError
from edgeopt.metrics.base import MetricSpec

ProfileOption = typer.Option("host", "--profile", "-p", help="Device profile name or YAML file.")
ProfileDirOption = typer.Option(None, "--profile-dir", help="Extra directory of profile YAML files.")
InputShapeOption = typer.Option(None, "--input-shape",
                                help="Fix an input's shape: NAME=DIMS, e.g. input=1x3x224x224 (repeatable).")


# The chain options' flags are generated from their declarations (edgeopt/cli/chain_flags.py); these are the
# data and run flags several verbs share.
CalibOption = typer.Option(None, "--calib", help="Calibration data: .npz named after the inputs, or an image folder.")
EvalOption = typer.Option(None, "--eval", help="Evaluation data (.npz with 'labels', or class sub-folders).")
PreprocessOption = typer.Option(None, "--preprocess", help="Image preprocessing: resize=224x224,mean=...,std=...,"
                                "layout=NCHW,channels=RGB,scale=255 or a YAML file.")
RecipeOption = typer.Option(None, "--recipe", help="Recipe YAML (backend, precision, prune, stages: {...}).")
DryRunOption = typer.Option(False, "--dry-run", help="Print the plan and stop.")


def _streams(value: str | None) -> int | str | None:
    from edgeopt.runtime.throughput import parse_streams

    try:
        return parse_streams(value)
    except ValueError as err:
        raise UsageError(f"--streams '{value}' is not a count or 'auto'", "e.g. --streams 4 or --streams auto") from err


StreamsOption = typer.Option(None, "--streams", callback=_streams,
                             help="Also measure N requests in flight at once; 'auto': the backend's choice.")
BatchOption = typer.Option(None, "--batch", min=1, help="Also measure one stream at this batch (symbolic batch dims).")
MetricOption = typer.Option(None, "--metric", help=AccuracyBound.model_fields["metric"].description)  # its declaration
MetricAxisOption = typer.Option(None, "--metric-axis", help="The output's class axis (e.g. 1 for [N,C,H,W]).")
CtcBlankOption = typer.Option(None, "--ctc-blank", min=0, help="--metric ctc: the blank class index (default 0).")
MetricThresholdOption = typer.Option(None, "--metric-threshold",
                                     help="Threshold of map_iou maps and one-value decisions (default 0.5; a one-value logit: 0).")
MinSqnrOption = typer.Option(None, "--min-sqnr-db", help="--metric sqnr: the SQNR target and gate, in dB (default 30).")
MetricOutputOption = typer.Option(None, "--metric-output",
                                  help=MetricSpec.model_fields["output"].description)  # its declaration


def metric_spec(metric, metric_axis, ctc_blank, metric_threshold, min_sqnr_db, metric_output=None):
    """The :class:`edgeopt.metrics.MetricSpec` of the --metric options (None when none was given)."""
    from edgeopt.metrics import parse_metric_spec

    return parse_metric_spec(metric, axis=metric_axis, ctc_blank=ctc_blank, threshold=metric_threshold,
                             min_sqnr_db=min_sqnr_db, output=metric_output)
