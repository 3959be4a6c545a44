"""The import graph of edgeopt (``edgeopt``, ``edgeopt.converters``, ``edgeopt.remote``) has no cycle, lazy
imports inside functions included, and no module imports another module's private name.

A module importing from one of its own parent packages is not an edge: Python initializes a package before
any of its modules, so such an import can't close a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"edgeopt": REPO / "edgeopt", "edgeopt.converters": REPO / "converters", "edgeopt.remote": REPO / "remote",
         "edgeopt.device_profiles": REPO / "device_profiles"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, root in ROOTS.items():
        for f in root.rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = f
    return out


def _imports(mod: str, path: Path):
    """(imported module, imported name or None) for every import statement, nested ones included."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                yield base, a.name


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for base, name in _imports(mod, path):
            target = f"{base}.{name}" if name and f"{base}.{name}" in mods else base
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != mod and not mod.startswith(target + "."):
                graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_cycle_finder_finds_a_cycle_and_ignores_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_edgeopt_has_no_import_cycle():
    graph = import_graph()
    assert "edgeopt.profiles" in graph and "edgeopt.converters.registry" in graph
    assert cycles(graph) == []


def test_no_module_imports_another_modules_private_name():
    mods = modules()
    bad = []
    for mod, path in mods.items():
        for base, name in _imports(mod, path):
            if name and name.startswith("_") and not name.startswith("__") and base in mods and base != mod:
                bad.append(f"{mod} imports {base}.{name}")
    assert bad == []


# Orchestration: the planner, the executor, the commands and API functions, and what they call to write and judge
# an artifact. Stages are called by it; they never call it.
ORCHESTRATION = ("edgeopt.plan", "edgeopt.chain", "edgeopt.cli", "edgeopt.api", "edgeopt.convert", "edgeopt.tune",
                 "edgeopt.pipeline", "edgeopt.optimize", "edgeopt.bench", "edgeopt.remote", "edgeopt.artifact",
                 "edgeopt.validate", "edgeopt.results", "edgeopt.report", "edgeopt.cache_key",
                 "edgeopt.convert_build", "edgeopt.backend_choice", "edgeopt.option_resolution")
# What still reaches up, and why. Each entry is a debt, not a licence: remove it once fixed.
STAGE_IMPORTS_ALLOWED: set[tuple[str, str]] = set()


def _is_orchestration(target: str) -> bool:
    return any(target == o or target.startswith(o + ".") for o in ORCHESTRATION)


def test_stages_never_import_the_planner_executor_or_commands():
    graph = import_graph()
    up = {(mod, target) for mod, targets in graph.items() if mod.startswith("edgeopt.converters")
          for target in targets if _is_orchestration(target)}
    assert up - STAGE_IMPORTS_ALLOWED == set(), "a stage imports orchestration (it is called by it, never the reverse)"
    assert STAGE_IMPORTS_ALLOWED <= up, "an allowed import is gone: drop it from STAGE_IMPORTS_ALLOWED"


def _stage_classes(path: Path) -> set[str]:
    """The names of the ``@register_stage`` classes a module defines (and ``BACKEND``, a backend's export of one)."""
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)
             and any(getattr(d, "id", getattr(d, "attr", None)) == "register_stage" for d in n.decorator_list)}
    exported = {t.id for n in tree.body if isinstance(n, ast.Assign) and getattr(n.value, "id", None) in names
                for t in n.targets if isinstance(t, ast.Name)}
    return names | exported


def test_a_stage_never_runs_another_stage_class():
    """A stage that does another stage's work inside its own (``--prune auto`` distilling each candidate) calls that
    work's plain function with the planned config (``recover.distil_student`` with ``auto_recover_config``), never
    the other ``Stage`` class: the executor alone runs stages. (It used to build a Recover stage with a record of
    its own inside the prune stage.)"""
    mods = {m: p for m, p in modules().items() if m.startswith("edgeopt.converters") and m != "edgeopt.converters.registry"}
    classes = {m: _stage_classes(p) for m, p in mods.items()}
    bad = []
    for mod, path in mods.items():
        own = classes[mod].union(*(n for o, n in classes.items() if o.startswith(mod + ".")))  # a package re-exports
        others = {name: owner for owner, names in classes.items() if owner != mod for name in names - own}
        for node in ast.walk(ast.parse(path.read_text())):
            used = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if isinstance(node, ast.ImportFrom):
                bad += [f"{mod} imports {a.name}" for a in node.names if a.name in others]
            elif used in others:
                bad.append(f"{mod} uses {others[used]}.{used}")
    assert classes["edgeopt.converters.recover"] == {"Recover"} and "BACKEND" in classes["edgeopt.converters.backends.tflite.stage"]
    assert sorted(set(bad)) == []
