"""Where the runtime's plain default differs from the setting an artifact was judged at (each backend says where,
its hooks' ``plain_default``: OpenVINO's CPU runs bf16 by default on CPUs with AVX512-BF16 or AMX): the line
convert says about it, and the artifact judged again at that default."""

from __future__ import annotations

from edgeopt.converters.hooks import PlainDefault

from .honours import hooks_for
from .model import ConsumerCheck, PlainDefaultJudged


def plain_default(record: ConsumerCheck, manifest: dict, profile) -> PlainDefault | None:
    """What a plain load of the artifact (``record.bare``) runs at where it is not what the artifact was judged
    at, for ``profile``; None: nothing to say."""
    if record.bare is None:
        return None
    return hooks_for(manifest["runtime"].get("backend")).plain_default(manifest, record.bare.applied, profile)


def judge_at_default(manifest: dict, found: PlainDefault, validate, bound: float | None) -> PlainDefaultJudged:
    """The artifact validated again (``validate``: manifest -> Validation) with ``found.setting`` set to the
    plain default it ran at."""
    runtime = dict(manifest["runtime"])
    runtime["settings"] = {**(runtime.get("settings") or {}), found.setting: found.ran}
    v = validate({**manifest, "runtime": runtime})
    gate = (v.gates or {}).get("max_accuracy_drop")
    return PlainDefaultJudged(setting=found.setting, judged=found.judged, plain_default=found.ran, metric=v.metric,
                              metric_value=v.metric_value, metric_drop=v.metric_drop, bound=bound,
                              holds_bound=gate.passed if gate is not None else None, samples=v.samples,
                              data_source=v.data_source)
