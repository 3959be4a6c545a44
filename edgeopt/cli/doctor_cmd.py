"""``edgeopt doctor``: what is installed, and what this host is."""

from __future__ import annotations

import typer
from rich.table import Table

from edgeopt import api
from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit


def _status(r: dict) -> tuple[str, str]:
    if not r["installed"]:
        return "[yellow]missing[/]", r.get("install", "")
    if r.get("imports") is False:
        return f"[red]broken[/] {r.get('import_error', '')}", ""
    if r.get("imports") is None:
        return "installed (import not tried)", ""
    extra = r.get("providers") or r.get("devices")
    return "[green]ok[/]" + (f" ({', '.join(extra)})" if extra else ""), ""


@app.command()
def doctor(
    json_out: bool = JsonOption,
    full: bool = typer.Option(False, "--full", help="Also import the slow runtimes (TensorFlow, TVM, NNCF, torch)."),
) -> None:
    """Report installed runtimes and their versions, tools for cross-compiling/emulation/SSH, and this host."""
    report = api.doctor(full=full)

    def human(c):
        cpu, mem = report["cpu"], report["memory"]
        c.print(f"edgeopt {report['edgeopt']} on Python {report['python']} ({report['platform']})")
        c.print(f"CPU: {cpu['model']} ({cpu['arch']}), {cpu['cores']} cores usable, "
                f"{cpu['mhz'] or '?'} MHz, ISA: {' '.join(cpu['isa']) or '-'}")
        have = [k for k, v in cpu["features"].items() if v]
        c.print(f"     inference features: {', '.join(have) or 'none'}")
        c.print(f"Memory: {mem['total_gb']} GB total, {mem['available_gb']} GB available")
        t = Table("runtime", "version", "status", "install")
        for r in report["runtimes"]:
            status, fix = _status(r)
            t.add_row(r["name"], r["version"] or "-", status, fix)
        c.print(t)
        for name, tool in report["tools"].items():
            where = tool["path"] if tool["found"] else f"[yellow]not found[/] ({tool['install']})"
            c.print(f"{name}: {where}  [dim]- {tool['purpose']}[/]")
        for w in report["warnings"]:
            c.print(f"[bold yellow]warning:[/] {w}")

    emit(json_out, report, human)
