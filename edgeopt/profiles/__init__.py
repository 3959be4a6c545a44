"""Device profiles: a typed, frozen schema for ``device_profiles/*.yaml``, and how a name reaches one.

| module | what |
|---|---|
| :mod:`.model` | the schema (``DeviceProfile`` and its parts), unknown keys rejected at any depth |
| :mod:`.validation` | one-line errors with "did you mean"; ``sources`` keys that name no number |
| :mod:`.loading` | built-ins, ``--profile-dir`` / ``EDGEOPT_PROFILE_PATH`` directories, files, ``host`` |
| :mod:`.names` | names, aliases and families → one profile (``load_profile``, ``resolve_profile``) |

Profiles come from the package (``edgeopt.device_profiles``), from directories named by ``--profile-dir`` or
``EDGEOPT_PROFILE_PATH`` (``:``-separated), and ``host``, which is detected from this machine at run time
(see ``edgeopt.host``). Unknown keys are errors with a "did you mean" hint, at any depth (inside compute
units, backends, sources), and so are duplicate YAML keys and ``sources`` entries that name no number.

``sources`` maps a number's key path to where it comes from. A path names compute units by kind, e.g.
``compute_units.cpu.peak_gops`` (all precisions) or ``compute_units.gpu.sparse_peak_gops.int8`` (one),
``memory.bandwidth_gbps``, ``tdp_w``; the most specific entry wins (:meth:`DeviceProfile.source_for`).
Everything else imports from here, never from the modules.
"""

from __future__ import annotations

from .loading import PROFILE_PATH_ENV, available_profiles, load_profile_file, parse_profile, read_yaml
from .model import (
    ISA_ALIASES,
    NAME_PATTERN,
    BackendTarget,
    ComputeUnit,
    DefaultChain,
    DeviceProfile,
    Memory,
    PeakThroughput,
    RemoteDefaults,
    Source,
    profile_to_dict,
)
from .names import NameKind, ProfileChoice, load_profile, profile_index, resolve_profile
from .validation import check_source_keys, describe_validation_error, format_loc, model_at

__all__ = [
    "ISA_ALIASES", "NAME_PATTERN", "PROFILE_PATH_ENV", "BackendTarget", "ComputeUnit", "DefaultChain",
    "DeviceProfile", "Memory", "NameKind", "PeakThroughput", "ProfileChoice", "RemoteDefaults", "Source",
    "available_profiles", "check_source_keys", "describe_validation_error", "format_loc", "load_profile",
    "load_profile_file", "model_at", "parse_profile", "profile_index", "profile_to_dict", "read_yaml",
    "resolve_profile",
]
