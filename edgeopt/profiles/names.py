"""The names users type: profile names, aliases and families, resolved to one profile.

A family name (``jetson-orin``) picks its member with ``family_default: true`` and says so on stderr;
an alias (``rpi5``) resolves silently; an exact name wins over both."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from edgeopt.enums import StrEnum
from edgeopt.errors import BadProfileError, did_you_mean

from .loading import available_profiles, load_exact, search_dirs
from .model import DeviceProfile

_ANNOUNCED: set[str] = set()  # family names already explained on stderr in this process


class NameKind(StrEnum):
    """What kind of name the user typed for a profile."""

    NAME = "name"  # the profile's own name
    ALIAS = "alias"  # one of its aliases (rpi5)
    FAMILY = "family"  # a family (jetson-orin): its default member is chosen


@dataclass(frozen=True)
class ProfileChoice:
    """How a typed name reached a profile."""

    requested: str
    name: str  # the profile chosen ("" for a family without a default member)
    via: NameKind
    family: str | None = None
    members: tuple[str, ...] = ()

    @property
    def note(self) -> str | None:
        if self.via != NameKind.FAMILY:
            return None
        others = [m for m in self.members if m != self.name]
        pick = f"; for another member give --profile {' or '.join(others)}" if others else ""
        return f"'{self.requested}' is a profile family: using its default member '{self.name}'{pick}"


def profile_index(profile_dirs: list[str | os.PathLike] | None = None) -> dict[str, ProfileChoice]:
    """Every name a user may type (profile names, aliases, families) -> its :class:`ProfileChoice`.

    Profiles that fail to load are left out (naming them gives their own error). A name claimed twice is an
    error naming both files: an alias of two profiles, or a profile name, alias or family that is also
    another profile's name, alias or family (a user file named like a built-in replaces it: not a conflict)."""
    profiles: dict[str, DeviceProfile] = {}
    origins = available_profiles(profile_dirs)
    for name in origins:
        if name == "host":
            continue
        try:
            p = load_exact(name, profile_dirs)
        except BadProfileError:
            continue
        if p is not None:
            profiles[name] = p
    index: dict[str, ProfileChoice] = {n: ProfileChoice(n, n, NameKind.NAME) for n in origins}
    claimed: dict[str, str] = {}  # alias or family -> who claims it (for the conflict message)

    def claim(word: str, owner: str) -> None:
        if word in claimed and claimed[word] != owner:
            raise BadProfileError(
                f"the profile name '{word}' is claimed twice: {claimed[word]} and {owner}",
                "remove it from one of them (aliases and families must name one profile or family)",
                details={"name": word, "claims": [claimed[word], owner]},
            )
        claimed[word] = owner

    def where(name: str) -> str:
        origin = origins.get(name, "")
        return f"device_profiles/{name}.yaml" if origin == "builtin" else origin

    for p in profiles.values():  # a profile's own name: no alias or family of another may take it
        claim(p.name, f"profile {p.name} ({where(p.name)})")
    families: dict[str, list[DeviceProfile]] = {}
    for p in profiles.values():
        for a in p.aliases:
            claim(a, f"alias of {p.name} ({where(p.name)})")
        if p.family:
            families.setdefault(p.family, []).append(p)
    for fam, members in families.items():
        claim(fam, f"family of {', '.join(f'{m.name} ({where(m.name)})' for m in members)}")
        defaults = [m.name for m in members if m.family_default]
        if len(defaults) > 1:
            raise BadProfileError(f"profile family '{fam}' has {len(defaults)} default members: {', '.join(defaults)}",
                                  "set family_default: true in only one of them")
        names = tuple(sorted(m.name for m in members))
        default = defaults[0] if defaults else (names[0] if len(names) == 1 else "")
        if fam not in index:  # an exact profile name wins
            index[fam] = ProfileChoice(fam, default, NameKind.FAMILY, fam, names)
    for p in profiles.values():
        for a in p.aliases:
            if a not in index:
                index[a] = ProfileChoice(a, p.name, NameKind.ALIAS, p.family)
    return dict(sorted(index.items()))


def check_file_names(profile: DeviceProfile, path: str, profile_dirs=None) -> None:
    """A profile given by its path claims its aliases and family like one in a profile directory: one that is
    another profile's name or alias is an error naming both files."""
    index = profile_index(profile_dirs)
    for word in (*profile.aliases, *([profile.family] if profile.family else [])):
        other = index.get(word)
        if other is None or other.name == profile.name or (other.via == NameKind.FAMILY and word == profile.family):
            continue
        origin = available_profiles(profile_dirs).get(other.name, "")
        theirs = f"device_profiles/{other.name}.yaml" if origin == "builtin" else origin
        raise BadProfileError(f"the profile name '{word}' is claimed twice: {profile.name} ({path}) and "
                              f"{other.via.value} of {other.name} ({theirs})",
                              "remove it from one of them (aliases and families must name one profile or family)",
                              details={"name": word, "claims": [path, theirs]})


def load_profile(name_or_path: str, profile_dirs: list[str | os.PathLike] | None = None) -> DeviceProfile:
    """A profile by name (user dirs, then built-ins, ``host`` detected), alias, family or YAML path.

    A family name picks its default member and says so once on stderr (:func:`resolve_profile`
    returns the choice instead, for callers that record it)."""
    profile, choice = resolve_profile(name_or_path, profile_dirs)
    if choice.via == NameKind.FAMILY and name_or_path not in _ANNOUNCED:
        _ANNOUNCED.add(name_or_path)
        sys.stderr.write(f"edgeopt: note: {choice.note}\n")
    return profile


def resolve_profile(name_or_path: str, profile_dirs: list[str | os.PathLike] | None = None
                    ) -> tuple[DeviceProfile, ProfileChoice]:
    """(the profile, how ``name_or_path`` reached it). Exact names win over aliases and families. With user
    profiles (``--profile-dir``, ``EDGEOPT_PROFILE_PATH``) every name they claim is checked against the others
    when they are loaded, whichever name was typed."""
    index = profile_index(profile_dirs) if search_dirs(profile_dirs) else None
    exact = load_exact(name_or_path, profile_dirs)
    if exact is not None:
        if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
            check_file_names(exact, name_or_path, profile_dirs)
        return exact, ProfileChoice(name_or_path, exact.name, NameKind.NAME)
    index = index if index is not None else profile_index(profile_dirs)
    choice = index.get(name_or_path)
    if choice is None:
        hint = did_you_mean(name_or_path, index) or f"known profiles: {', '.join(available_profiles(profile_dirs))}"
        raise BadProfileError(f"unknown device profile '{name_or_path}'", hint)
    if choice.via == NameKind.FAMILY and not choice.name:
        raise BadProfileError(
            f"profile family '{name_or_path}' has no default member",
            f"pick one: {', '.join(choice.members)} (or set family_default: true in one of them)",
        )
    profile = load_exact(choice.name, profile_dirs)
    assert profile is not None  # the index was built from loadable profiles
    return profile, choice
