"""Whether a model is a classifier early exits can be added to."""

from __future__ import annotations

from edgeopt.errors import BadInputError


def classifier_output_of(outputs, strict: bool = True) -> str:
    """The one [N, C] class-score output (C >= 2) of a model's outputs (TensorSpecs); anything else exit 3.
    ``strict=False``: a class count not known yet (a dynamic dimension before ``--input-shape`` is applied) passes."""
    if len(outputs) != 1:
        raise BadInputError(f"--early-exit needs a classifier with one output [N, classes]; this model has "
                            f"{len(outputs)} outputs", "use --early-exit off for this model")
    shape = tuple(outputs[0].shape)
    classes = shape[-1] if shape else None
    unknown = not isinstance(classes, int) and not strict  # before the shapes are fixed: only the rank is known
    if len(shape) != 2 or not (unknown or (isinstance(classes, int) and classes >= 2)):
        raise BadInputError(f"--early-exit needs a class-score output [N, classes]; output '{outputs[0].name}' is "
                            f"{list(shape)}", "use --early-exit off for this model (a map, a sequence or a "
                            "detector has no single class to leave early with)")
    return outputs[0].name
