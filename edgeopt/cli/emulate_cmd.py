"""``edgeopt emulate start|stop|status``: emulated devices (a real sshd on loopback; qemu for aarch64)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit, stderr

emulate_app = typer.Typer(help="Emulated devices: a real sshd on 127.0.0.1 (aarch64 Python under qemu-user).",
                          no_args_is_help=True)
app.add_typer(emulate_app, name="emulate")

DevicesFileOption = typer.Option(None, "--devices", help="Inventory file (default: $EDGEOPT_CONFIG_DIR/devices.toml).")


@emulate_app.command("start")
def start(
    profile: str = typer.Argument("pi5", help="Profile to emulate: an aarch64 one (pi5) or 'host'."),
    name: str = typer.Option(None, "--name", help="Device name (default: PROFILE-emu)."),
    port: int = typer.Option(None, "--port", help="Port for sshd on 127.0.0.1 (default: a free one)."),
    json_out: bool = JsonOption,
    devices: Path = DevicesFileOption,
) -> None:
    """Start an emulated device and add it to the inventory (emulated = true)."""
    from edgeopt.remote.emulate import start_emulator

    st = start_emulator(profile, name, port, devices_path=devices, notify=lambda m: stderr.print(m, markup=False))
    emit(json_out, {"emulator": st}, lambda c: c.print(
        f"emulated device '{st['name']}' ({profile}) on 127.0.0.1:{st['port']} (sshd pid {st['pid']}); "
        f"try: edgeopt devices check {st['name']}  [timings on it are labelled 'emulated']", markup=False))


@emulate_app.command("stop")
def stop(name: str = typer.Argument(None, help="Emulated device to stop (default: all)."),
         wait: float = typer.Option(0.0, "--wait", min=0,
                                    help="First wait up to this many seconds for runs in progress to end."),
         json_out: bool = JsonOption, devices: Path = DevicesFileOption) -> None:
    """Stop emulated devices: their sshd and its sessions (runs in progress fail and are not stored), by
    PID; then drop them from the inventory."""
    from edgeopt.remote.emulate import stop_emulator

    stopped = stop_emulator(name, devices_path=devices, wait_s=wait)
    emit(json_out, {"stopped": stopped},
         lambda c: c.print("\n".join(f"stopped '{s['name']}' (pid {s['pid']}; {s['sessions_stopped']} session "
                                     "process(es) stopped)" for s in stopped) or "nothing running"))


@emulate_app.command("status")
def status(json_out: bool = JsonOption) -> None:
    """Emulated devices and whether their sshd is running."""
    from edgeopt.remote.emulate import emulator_status

    rows = emulator_status()

    def human(c):
        t = Table("device", "profile", "port", "pid", "running")
        for r in rows:
            t.add_row(r["name"], r["profile"], str(r["port"]), str(r["pid"]), "yes" if r["running"] else "no")
        c.print(t if rows else "no emulated devices")

    emit(json_out, {"emulators": rows}, human)
