"""``edgeopt devices list|add|remove|check``: the device inventory (devices.toml)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit, stderr

devices_app = typer.Typer(help="The device inventory: boards reached over SSH, and emulated ones.",
                          no_args_is_help=True)
app.add_typer(devices_app, name="devices")

DevicesFileOption = typer.Option(None, "--devices", help="Inventory file (default: $EDGEOPT_CONFIG_DIR/devices.toml).")


@devices_app.command("list")
def list_(json_out: bool = JsonOption, devices: Path = DevicesFileOption) -> None:
    """List the devices in the inventory."""
    from edgeopt.remote.inventory import devices_file, load_devices

    devs = load_devices(devices)
    rows = [d.model_dump(mode="json") for d in devs.values()]

    def human(c):
        if not rows:
            c.print(f"no devices in {devices_file(devices)} (add one with 'edgeopt devices add')")
            return
        t = Table("device", "host", "user", "profile", "python", "emulated")
        for r in rows:
            t.add_row(r["name"], _where(r), r["user"] or "", r["profile"], r["python"], "emulated" if r["emulated"] else "")
        c.print(t)

    emit(json_out, {"devices_file": str(devices_file(devices)), "devices": rows}, human)


def _where(r: dict) -> str:
    """``host:port``, or the labgrid place (or tags) and coordinator."""
    if r.get("transport") == "labgrid":
        what = r.get("labgrid_place") or " ".join(f"{k}={v}" for k, v in (r.get("labgrid_tags") or {}).items())
        return f"labgrid {what} @ {r.get('coordinator')}"
    return f"{r['host']}:{r['port']}" if r["port"] else r["host"]


@devices_app.command("add")
def add(
    name: str = typer.Argument(..., help="Device name (letters, digits, '.', '_', '-')."),
    host: str = typer.Option(None, "--host", help="Host name, address or ~/.ssh/config alias (an SSH device)."),
    profile: str = typer.Option(..., "--profile", help="Device profile (e.g. pi5)."),
    port: int = typer.Option(None, "--port", help="SSH port (default: ~/.ssh/config or 22)."),
    user: str = typer.Option(None, "--user", help="SSH user (default: ~/.ssh/config or yours)."),
    key: str = typer.Option(None, "--key", help="Private key file (default: agent and ~/.ssh keys)."),
    python: str = typer.Option("python3", "--python", help="Python on the device."),
    work_dir: str = typer.Option("~/.cache/edgeopt-remote", "--work-dir", help="Where edgeopt may write on the device."),
    known_hosts: str = typer.Option(None, "--known-hosts", help="An extra known_hosts file for this device."),
    labgrid_place: str = typer.Option(None, "--labgrid-place",
                                      help="A labgrid place (board farm): acquired for each run, its NetworkService "
                                      "gives the SSH address."),
    labgrid_tags: list[str] = typer.Option(None, "--labgrid-tags",
                                           help="KEY=VALUE (repeatable): any free labgrid place with these tags."),
    coordinator: str = typer.Option(None, "--coordinator", help="The labgrid coordinator, HOST:PORT."),
    replace: bool = typer.Option(False, "--replace", help="Replace an existing entry of that name."),
    json_out: bool = JsonOption,
    devices: Path = DevicesFileOption,
) -> None:
    """Add a device to the inventory: a host over SSH (--host), or a board-farm place (--labgrid-place or
    --labgrid-tags, with --coordinator)."""
    from edgeopt.errors import UsageError
    from edgeopt.profiles import load_profile
    from edgeopt.remote.inventory import TransportKind, add_device, make_device

    resolved = load_profile(profile)  # an unknown profile is an error now, not at the first benchmark
    if not profile.endswith((".yaml", ".yml")) and "/" not in profile:
        profile = resolved.name  # an alias or family is stored as the profile it names
    farm = {}
    if labgrid_place or labgrid_tags or coordinator:
        if host:
            raise UsageError("give --host (an SSH device) or a labgrid place/tags, not both")
        tags = {}
        for pair in [t for arg in labgrid_tags or [] for t in arg.split(",") if t]:
            k, sep, v = pair.partition("=")
            if not sep or not k or not v:
                raise UsageError(f"--labgrid-tags '{pair}' is not KEY=VALUE", "e.g. --labgrid-tags board=pi5")
            tags[k] = v
        farm = {"transport": TransportKind.LABGRID, "coordinator": coordinator, "labgrid_place": labgrid_place,
                "labgrid_tags": tags}
    elif not host:
        raise UsageError("give --host for an SSH device, or --labgrid-place/--labgrid-tags with --coordinator",
                         "edgeopt devices add pi5-lab --host 192.168.1.50 --profile pi5")
    dev = make_device(name=name, host=host, port=port, user=user, key=key, profile=profile, python=python,
                      work_dir=work_dir, known_hosts=known_hosts, **farm)
    path = add_device(dev, devices, replace=replace)
    emit(json_out, {"device": dev.model_dump(mode="json"), "devices_file": str(path)},
         lambda c: c.print(f"added '{dev.name}' ({_where(dev.model_dump())}, profile {dev.profile}) to {path}",
                           markup=False))


@devices_app.command("remove")
def remove(name: str, json_out: bool = JsonOption, devices: Path = DevicesFileOption) -> None:
    """Remove a device from the inventory."""
    from edgeopt.remote.inventory import devices_file, remove_device

    dev = remove_device(name, devices)
    emit(json_out, {"removed": dev.name, "devices_file": str(devices_file(devices))},
         lambda c: c.print(f"removed '{dev.name}'"))


@devices_app.command("check")
def check(
    name: str,
    accept_new_host_key: bool = typer.Option(False, "--accept-new-host-key",
                                             help="Trust and record an unknown host key (prints its fingerprint)."),
    json_out: bool = JsonOption,
    devices: Path = DevicesFileOption,
) -> None:
    """Reach a device and report what it has: arch, OS, Python, runtimes, disk, memory, governor, temperature."""
    from edgeopt.errors import RemoteError
    from edgeopt.remote.inventory import get_device
    from edgeopt.remote.probe import check_device

    dev = get_device(name, devices)
    report = check_device(dev, accept_new_host_key=accept_new_host_key, notify=lambda m: stderr.print(m, markup=False))
    if not report.get("reachable"):
        raise RemoteError(f"not reachable: {report.get('error')}", report.get("hint"))

    def human(c):
        c.print(f"[bold]{name}[/]: {report.get('arch')} {report.get('distro') or report.get('os')}, "
                f"python {report.get('python')}" + ("  [yellow](emulated)[/]" if dev.emulated else ""))
        if report.get("emulated_on"):
            host = report["emulated_on"]
            c.print(f"emulates profile {dev.profile} ({report.get('arch')}), running on host {host.get('hostname')} "
                    f"({host.get('arch')}, {host.get('kernel')}): its timings are not the board's speed", markup=False)
        t = Table("runtime", "imports", "version / error")
        for mod, r in (report.get("runtimes") or {}).items():
            t.add_row(mod, "yes" if r.get("imports") else "no", r.get("version") or r.get("error") or "")
        c.print(t)
        c.print(f"disk free {report.get('disk_free_gb')} GB, memory {report.get('memory_available_gb')} of "
                f"{report.get('memory_total_gb')} GB free, governor {report.get('governor')}, "
                f"temperature {report.get('temperature_c')} °C")

    emit(json_out, {"check": report}, human)
