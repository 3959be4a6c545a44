"""Backends in the profile's order of preference: when the first cannot hold the bound on this model,
the next is tried.

A profile lists its backends in order (pi5: TFLite, then ONNX Runtime for aarch64, then TVM). ``convert`` without
``--backend`` builds with the first installed one; when that build fails its gate (exit 5: the accuracy bound or
``--min-speedup`` not met), its converter fails on the model (exit 3: an op it can't take, a crash), or, under
``--verify-on``, the device's runtime can't run the artifact (exit 6: an op its kernels can't set up), the next
installed backend of the list is tried, saying why on stderr, and the artifact's manifest keeps every backend
tried and why it was left (``backend_fallback``). TVM is never a fallback: untuned, it is slower than the others
(``edgeopt tune``, then ``--backend tvm``). A backend the user names (``--backend``, a recipe's ``backend:``) is
never replaced.

For now this is the ARM boards' rule (profiles with ``arch: aarch64``: pi5, rpi4, the Jetsons), where the first
backend (TFLite, TensorRT) fails on models the next one holds. The other profiles (host, x86-avx512, intel-npu)
keep their first backend when it only misses the bound, but when its converter fails on the model (exit 3: a
crash inside NNCF, an op it can't take) or the device refuses the artifact, the next installed backend is tried
the same way (:func:`next_on_crash`).
"""

from __future__ import annotations

from edgeopt.enums import BackendName
from edgeopt.errors import DeviceRefusedError, GateFailedError, StageError, UnsupportedOpError

# the failures a next backend may not have: the gate, the converter failing on this model, and the device's runtime
# failing on the artifact (--verify-on)
FALLBACK_ON = (GateFailedError, StageError, UnsupportedOpError, DeviceRefusedError)
FALLBACK_ARCHES = ("aarch64",)
# the failures that send the other profiles on to their next backend: a converter or the device failing, not the gate
CRASH_ONLY = (StageError, UnsupportedOpError, DeviceRefusedError)


def backend_order(profile, profile_dirs=None) -> list[BackendName]:
    """The installed backends of ``profile`` (a name or a DeviceProfile) in its order of preference ([] where
    the profile falls back to none: the plain path)."""
    from edgeopt.profiles import DeviceProfile, resolve_profile

    prof = profile if isinstance(profile, DeviceProfile) else resolve_profile(str(profile), profile_dirs or None)[0]
    return installed_backends(prof) if prof.arch in FALLBACK_ARCHES else []


def installed_backends(prof) -> list[BackendName]:
    """The backends ``prof`` lists that are installed here, once each, in its order."""
    from edgeopt.converters.registry import get_backend

    order = []
    for target in prof.backends:
        try:
            installed = get_backend(target.name).available()
        except Exception:  # noqa: BLE001 - a backend edgeopt doesn't know here is simply not a candidate
            installed = False
        if installed and target.name not in order:
            order.append(target.name)
    return order


def fallbacks(order: list[BackendName]) -> list[BackendName]:
    """The backends tried after the first when it can't hold the bound."""
    from edgeopt.converters.registry import get_backend

    return [b for b in order[1:] if not get_backend(b).pays_only_tuned]


def another_backend_may_hold(err: Exception) -> bool:
    """False when the eval set is too small to confirm any INT8 (``details['samples_needed']``), or when the
    failure is the pruning's (``converters/prune_blame.py`` found it the main cause): the same
    pruned model would miss the bound on any backend, and the error already names the flag to turn it off."""
    details = getattr(err, "details", None) or {}
    if "samples_needed" in details:  # too few eval samples to confirm anything: the same on every backend
        return False
    return not (isinstance(details.get("pruning"), dict) and details["pruning"].get("main_cause"))


def left_because(backend: BackendName, err: Exception):
    """One entry of the manifest's ``backend_fallback``: the backend, its exit code and the one-line reason."""
    from edgeopt.artifact import BackendLeft

    message = getattr(err, "message", str(err))
    return BackendLeft(backend=backend.value, exit_code=int(getattr(err, "exit_code", 1)), reason=message)


def next_on_crash(build, profile, profile_dirs=None, on_warning=None):
    """``build(backend, left)`` with the profile's own first backend (``backend`` None: the plain path); when that
    converter fails on the model (:data:`CRASH_ONLY`), with each next installed backend of the profile (TVM
    never), ``left`` holding the :class:`~edgeopt.artifact.BackendLeft` of each one left, for the manifest's
    ``backend_fallback``. The last failure is raised when none builds it; a gate failure is raised at once."""
    from edgeopt.profiles import DeviceProfile, resolve_profile

    prof = profile if isinstance(profile, DeviceProfile) else resolve_profile(str(profile), profile_dirs or None)[0]
    first = prof.preferred_backend.name if prof.backends else None
    rest = [b for b in fallbacks(installed_backends(prof)) if b != first] if first is not None else []
    left: list = []
    current = None
    for nxt in [*rest, None]:
        try:
            return build(current, tuple(left))
        except CRASH_ONLY as err:
            if nxt is None:
                if left:
                    err.message += " (also tried: " + "; ".join(f"{e.backend}: exit {e.exit_code}" for e in left) + ")"
                raise
            left.append(left_because(current or first, err))
            if on_warning:
                on_warning(f"convert: {(current or first).value} could not hold this model ({err.message}); trying "
                           f"{nxt.value}, the profile's next backend")
            current = nxt
    raise AssertionError("unreachable")
