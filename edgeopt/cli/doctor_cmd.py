"""``edgeopt doctor``: what is installed, and what this host is."""

from __future__ import annotations

from rich.table import Table

from edgeopt import api
from edgeopt.cli import app
from edgeopt.cli.output import JsonOption, emit


@app.command()
def doctor(json_out: bool = JsonOption) -> None:
    """Report installed backends and runtimes, their versions, and this host's CPU."""
    report = api.doctor()

    def human(c):
        cpu = report["cpu"]
        c.print(f"edgeopt {report['edgeopt']} on Python {report['python']} ({report['platform']})")
        c.print(f"CPU: {cpu['model']} ({cpu['arch']}), {cpu['cores']} cores usable, ISA: {' '.join(cpu['isa']) or '-'}")
        t = Table("runtime", "version", "status", "install")
        for r in report["runtimes"]:
            if not r["installed"]:
                status, fix = "[yellow]missing[/]", f"pip install 'edgeopt[{r['extra']}]'" if r["extra"] else f"pip install {r['name']}"
            elif r.get("imports") is False:
                status, fix = f"[red]broken[/] {r.get('import_error', '')}", ""
            else:
                status, fix = "[green]ok[/]", ""
            t.add_row(r["name"], r["version"] or "-", status, fix)
        c.print(t)
        for tool, path in report["tools"].items():
            c.print(f"{tool}: {path or '[yellow]not found[/]'}")

    emit(json_out, report, human)
