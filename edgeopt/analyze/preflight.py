"""Pre-flight: what each backend the profile lists would refuse, asked of the backend itself.

Each backend names its check on its class (``preflight_check``, in ``converters/backends/<name>/preflight.py``):
``(onnx model, BackendTarget) -> [PreflightIssue]``, built with :func:`ok`, :func:`unsupported` and
:func:`first_line` here. Each backend is optional: one not installed is reported as such and skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeopt.analyze.result import PreflightIssue, PreflightKind, Severity
from edgeopt.enums import BackendName
from edgeopt.errors import MissingDependencyError
from edgeopt.profiles import BackendTarget, DeviceProfile


def first_line(err: BaseException, limit: int = 240) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:limit]


def _nodes(graph):
    """Every node of ``graph`` and of its subgraphs (If/Loop/Scan bodies)."""
    for n in graph.node:
        yield n
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _nodes(g)


def op_types(model) -> list[str]:
    return sorted({n.op_type for n in _nodes(model.graph)})


def ok(target: BackendTarget, how: str) -> PreflightIssue:
    return PreflightIssue(backend=target.name, unit=target.unit, severity=Severity.INFO, kind=PreflightKind.OK,
                          message=f"{target.name.value}: {how}")


def unsupported(target: BackendTarget, ops: list[str], how: str) -> PreflightIssue:
    return PreflightIssue(
        backend=target.name, unit=target.unit, severity=Severity.ERROR, kind=PreflightKind.UNSUPPORTED_OP,
        message=f"{target.name.value}: {len(ops)} op type(s) not supported ({how}): {', '.join(ops)}", ops=ops,
    )


def check_for(backend: BackendName) -> Callable:
    """The backend's own op check, named by its class (``preflight_check``)."""
    from edgeopt.converters.registry import get_backend, resolve

    ref = get_backend(backend).preflight_check
    return resolve(ref) if ref else (lambda model, target: [])


def static_shape_issues(original, unknown: list[str], profile: DeviceProfile) -> list[PreflightIssue]:
    from edgeopt.model import graph_inputs

    out = []
    dynamic = [s for s in graph_inputs(original) if not s.is_static]
    if dynamic and profile.requires_static_shapes:
        names = ", ".join(f"{s.name}{list(s.shape)}" for s in dynamic)
        out.append(PreflightIssue(
            severity=Severity.WARNING, kind=PreflightKind.DYNAMIC_SHAPE,
            message=f"{profile.name} needs static shapes and the model's inputs are dynamic ({names}): "
                    "convert with --input-shape (fixed for this analysis)",
        ))
    if unknown:
        sev = Severity.ERROR if profile.requires_static_shapes else Severity.WARNING
        out.append(PreflightIssue(
            severity=sev, kind=PreflightKind.DYNAMIC_SHAPE,
            message=f"{len(unknown)} intermediate tensor(s) have data-dependent shapes (e.g. '{unknown[0]}')"
                    + (f"; {profile.name} needs static shapes" if profile.requires_static_shapes else ""),
        ))
    return out


def weight_issues(model) -> list[PreflightIssue]:
    """The normalize stage's weight check, said ahead: broken weights are an error; ±inf constants that
    are masks or the identity of a Max (legitimate, e.g. in JAX exports) are noted."""
    from edgeopt.converters.normalize import check_finite_weights
    from edgeopt.errors import BadModelError

    try:
        accepted = check_finite_weights(model, "model")
    except BadModelError as err:
        return [PreflightIssue(severity=Severity.ERROR, kind=PreflightKind.WEIGHTS, message=err.message)]
    if not accepted:
        return []
    names = ", ".join(f"'{n}'" for n in accepted[:3]) + ("…" if len(accepted) > 3 else "")
    return [PreflightIssue(severity=Severity.INFO, kind=PreflightKind.WEIGHTS,
                           message=f"{len(accepted)} ±inf constant(s) outside any weight ({names}): masks or the "
                                   "identity of a Max/Min, which convert accepts")]


def run_preflight(model, original, profile: DeviceProfile, unknown: list[str]) -> list[PreflightIssue]:
    """Issues for ``model`` (static shapes fixed) on every backend of ``profile``, plus shape and weight issues."""
    out = static_shape_issues(original, unknown, profile) + weight_issues(original)
    seen = set()
    for target in profile.backends:
        key = (target.name, target.unit, str(target.settings.get("device", "")))
        if key in seen:
            continue
        seen.add(key)
        try:
            out.extend(check_for(target.name)(model, target))
        except MissingDependencyError as err:
            out.append(PreflightIssue(
                backend=target.name, unit=target.unit, severity=Severity.INFO, kind=PreflightKind.NOT_INSTALLED,
                message=f"{target.name.value}: not checked: {err.one_line()}",
            ))
        except Exception as err:  # noqa: BLE001 - a checker that breaks must not hide the others
            out.append(PreflightIssue(
                backend=target.name, unit=target.unit, severity=Severity.WARNING, kind=PreflightKind.NOT_CHECKABLE,
                message=f"{target.name.value}: the check itself failed: {type(err).__name__}: {first_line(err)}",
            ))
    return out
