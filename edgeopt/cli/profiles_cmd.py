"""``edgeopt profiles list|show|validate``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from edgeopt import api
from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit
from edgeopt.profiles import profile_to_dict

profiles_app = typer.Typer(help="List, show and validate device profiles.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")

ProfileDirOption = typer.Option(
    None, "--profile-dir", help="Extra directory of profile YAML files (also EDGEOPT_PROFILE_PATH)."
)


@profiles_app.command("list")
def list_(json_out: bool = JsonOption, profile_dir: list[Path] = ProfileDirOption) -> None:
    """List the device profiles edgeopt knows."""
    names = api.list_profiles(profile_dir)
    rows = []
    for name, origin in names.items():
        try:
            p = api.load_profile(name, profile_dir) if name != "host" else None
            rows.append({"name": name, "origin": origin, "description": p.description if p else "this machine (detected)"})
        except Exception as err:  # noqa: BLE001 - a broken user file is listed, not fatal
            rows.append({"name": name, "origin": origin, "error": str(err)})

    def human(c):
        t = Table("profile", "description", "from")
        for r in rows:
            t.add_row(r["name"], r.get("description") or f"[red]{r.get('error')}[/]", r["origin"])
        c.print(t)

    emit(json_out, {"profiles": rows}, human)


@profiles_app.command("show")
def show(name: str, json_out: bool = JsonOption, profile_dir: list[Path] = ProfileDirOption) -> None:
    """Show one profile with its sources."""
    p = api.load_profile(name, profile_dir)
    data = profile_to_dict(p)

    def human(c):
        import yaml

        c.print(yaml.safe_dump(data, sort_keys=False), markup=False)

    emit(json_out, {"profile": data}, human)


@profiles_app.command("validate")
def validate(file: Path, json_out: bool = JsonOption) -> None:
    """Check a profile YAML file against the schema."""
    p = api.validate_profile(file)
    emit(json_out, {"valid": True, "name": p.name, "file": str(file)}, lambda c: c.print(f"{file}: valid profile '{p.name}'"))
