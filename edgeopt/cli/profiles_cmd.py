"""``edgeopt profiles list|show|validate``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from edgeopt import api
from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit
from edgeopt.errors import EdgeoptError
from edgeopt.profiles import DeviceProfile, profile_to_dict

profiles_app = typer.Typer(help="List, show and validate device profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")

ProfileDirOption = typer.Option(
    None, "--profile-dir", help="Extra directory of profile YAML files (also EDGEOPT_PROFILE_PATH); wins over built-ins."
)


@profiles_app.command("list")
def list_(json_out: bool = JsonOption, profile_dir: list[Path] = ProfileDirOption) -> None:
    """List the device profiles edgeopt knows, with their families and aliases (names you may type
    for --profile). ``host`` is detected from this machine when used."""
    from edgeopt.profiles import NameKind, profile_index

    names = api.list_profiles(profile_dir)
    index = profile_index(profile_dir)  # an alias claimed twice is an error here too
    rows = []
    for name, origin in names.items():
        if name == "host" and origin == "detected":
            rows.append({"name": name, "origin": origin, "description": "this machine (detected when used)",
                         "family": None, "aliases": []})
            continue
        try:
            p = api.load_profile(name, profile_dir)
            rows.append({"name": name, "origin": origin, "description": p.description, "family": p.family,
                         "family_default": p.family_default, "aliases": list(p.aliases)})
        except EdgeoptError as err:  # a broken user file is listed with its problem, not fatal
            rows.append({"name": name, "origin": origin, "error": err.one_line()})
    families = {c.requested: {"default": c.name or None, "members": list(c.members)}
                for c in index.values() if c.via == NameKind.FAMILY}
    aliases = {c.requested: c.name for c in index.values() if c.via == NameKind.ALIAS}

    def human(c):
        t = Table("profile", "family", "aliases", "description", "from")
        for r in rows:
            fam = (r.get("family") or "") + (" (default)" if r.get("family_default") else "")
            t.add_row(r["name"], fam, ", ".join(r.get("aliases") or []),
                      r.get("description") or f"[red]{r.get('error')}[/]", r["origin"])
        c.print(t)
        for fam, f in families.items():
            c.print(f"family {fam}: {', '.join(f['members'])}; '--profile {fam}' means "
                    + (f"{f['default']}" if f["default"] else "nothing (no default member: name one)"), markup=False)

    emit(json_out, {"profiles": rows, "families": families, "aliases": aliases}, human)


def _human_profile(c, p: DeviceProfile) -> None:
    c.print(f"[bold]{p.name}[/]: {p.description}" + ("  [dim](detected)[/]" if p.detected else ""))
    t = Table("unit", "cores", "GHz", "peak GOPS (dense)", "2:4 sparse GOPS", "ISA")
    for u in p.compute_units:
        peaks = ", ".join(f"{k} {v:g}" for k, v in u.peak_gops.model_dump().items() if v)
        sparse = ", ".join(f"{k} {v:g}" for k, v in u.sparse_peak_gops.model_dump().items() if v) if u.sparse_peak_gops else "-"
        t.add_row(f"{u.kind.value}: {u.name}", str(u.cores), f"{u.clock_ghz:g}", peaks, sparse, " ".join(u.isa) or "-")
    c.print(t)
    m = p.memory
    size = f"{m.size_gb:g} GB" if m.size_gb is not None else f"SRAM {m.sram_kb:g} KB, flash {m.flash_kb or 0:g} KB"
    budget = f", budget for a model {m.budget_bytes / 1e6:g} MB" if m.budget_mb is not None else ""
    c.print(f"memory: {size} {m.type}, {m.bandwidth_gbps:g} GB/s{budget}; TDP {p.tdp_w:g} W"
            + ("; needs static shapes" if p.requires_static_shapes else ""))
    c.print("backends, in order: " + "; ".join(f"{b.name.value} ({b.unit.value}) {b.settings}" for b in p.backends), markup=False)
    ch = p.default_chain
    c.print(f"default chain: {ch.precision.value}, prune {ch.prune:g}, 2:4 sparsity {ch.sparsity_2_4}")
    st = Table("number", "kind", "source", "note")
    for key, s in p.sources.items():
        st.add_row(key, s.kind.value, s.ref, s.note)
    c.print(st)


@profiles_app.command("show")
def show(name: str, json_out: bool = JsonOption, profile_dir: list[Path] = ProfileDirOption) -> None:
    """Show one profile (a name or a YAML path) with the source of each number."""
    p = api.load_profile(name, profile_dir)
    emit(json_out, {"profile": profile_to_dict(p), "missing_sources": p.missing_sources()}, lambda c: _human_profile(c, p))


@profiles_app.command("validate")
def validate(file: Path, json_out: bool = JsonOption) -> None:
    """Check a profile YAML file against the schema (exit 3 with the key path and a hint if it is wrong)."""
    p = api.validate_profile(file)
    missing = p.missing_sources()
    warnings = [f"no source for {m}: add sources['{m}'] (kind datasheet|derived|measured|estimate)" for m in missing]

    def human(c):
        c.print(f"{file}: valid profile '{p.name}'", markup=False)
        for w in warnings:
            c.print(f"[bold yellow]warning:[/] {w}")

    emit(json_out, {"valid": True, "name": p.name, "file": str(file), "warnings": warnings}, human)
