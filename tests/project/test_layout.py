"""One backend, one folder: a backend's code lives in ``converters/backends/<name>/`` and the rest of edgeopt reaches
it through the registry (the ``Backend`` class's attributes), never by importing the folder's modules or the
backend's library. Read from the product's syntax trees; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from backend_mentions import BACKENDS, REPO, backend_folder, mentions, product_modules, tools_allowed

ROOTS = {REPO / "edgeopt": "edgeopt", REPO / "converters": "edgeopt.converters", REPO / "remote": "edgeopt.remote"}

# (module, backend): why this module outside the folder may import the backend's package (none now: keep it so)
PACKAGE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}
# (module, library): why this module outside the backend's folder may import the backend's library
LIBRARY_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}  # none now: keep it so


def module_name(path: Path) -> str:
    for root, pkg in ROOTS.items():
        if path.is_relative_to(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            return ".".join([pkg, *(parts[:-1] if parts[-1] == "__init__" else parts)])
    raise ValueError(path)


def imported_modules(path: Path, tree: ast.AST) -> set[str]:
    """Every module an import statement in ``tree`` names (relative ones resolved, nested ones included), and the
    first argument of every ``require("module", ...)`` (edgeopt.deps' lazy import)."""
    mod, out = module_name(path), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "require"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value)
    return out


def _trees() -> dict[Path, ast.AST]:
    return {p: ast.parse(p.read_text(), str(p)) for p in product_modules()}


def package_import_violations(trees: dict[Path, ast.AST]) -> list[str]:
    bad = []
    for path, tree in trees.items():
        rel = str(path.relative_to(REPO))
        for backend in BACKENDS:
            package = f"edgeopt.converters.backends.{backend}"
            if path.is_relative_to(backend_folder(backend)) or (rel, backend) in PACKAGE_IMPORTS_ALLOWED:
                continue
            if any(m == package or m.startswith(package + ".") for m in imported_modules(path, tree)):
                bad.append(f"{rel} imports {package}")
    return bad


def library_import_violations(trees: dict[Path, ast.AST]) -> list[str]:
    bad = []
    for path, tree in trees.items():
        rel = str(path.relative_to(REPO))
        modules = imported_modules(path, tree)
        for backend, (_, libraries) in BACKENDS.items():
            runner = REPO / "edgeopt/runtime/runners" / f"{backend}.py"  # shipped to devices: its runtime, alone
            if path.is_relative_to(backend_folder(backend)) or path == runner:
                continue
            tools = tools_allowed(path, backend)  # the shared Q/DQ stage's graph tools (backend_mentions.GRAPH_TOOLS)
            roots = {m.split(".")[0] for m in modules
                     if not any(m == t or m.startswith(t + ".") for t in tools)}
            bad += [f"{rel} imports {lib}" for lib in sorted(roots & set(libraries))
                    if (rel, lib) not in LIBRARY_IMPORTS_ALLOWED]
    return bad


def test_only_a_backends_own_folder_imports_its_modules():
    """The registry imports a backend's package by name (``BACKEND_MODULES``); everything else asks the registry."""
    trees = _trees()
    assert package_import_violations(trees) == []
    present = {(str(p.relative_to(REPO)), b) for p, t in trees.items() for b in BACKENDS
               if any(m.startswith(f"edgeopt.converters.backends.{b}") for m in imported_modules(p, t))}
    assert set(PACKAGE_IMPORTS_ALLOWED) <= present, "an allowed import is gone: drop it from PACKAGE_IMPORTS_ALLOWED"


def test_only_a_backends_folder_and_runner_import_its_library():
    trees = _trees()
    assert library_import_violations(trees) == []
    present = {(str(p.relative_to(REPO)), m.split(".")[0]) for p, t in trees.items() for m in imported_modules(p, t)}
    assert set(LIBRARY_IMPORTS_ALLOWED) <= present, "an allowed import is gone: drop it from LIBRARY_IMPORTS_ALLOWED"


@pytest.mark.parametrize("line", ["from edgeopt.converters.backends.openvino.runs import compiled_run",
                                  "import openvino as ov", "nncf = require('nncf', 'x')", "import onnxruntime as ort",
                                  "from onnxruntime.quantization import quantize_static"])
def test_the_layout_checks_catch_a_new_import(line):
    """A central module gaining a backend's import is caught (the checks above are not vacuous), ONNX Runtime's
    included: the reference opens it through its runner, and its quantization tool belongs to the Q/DQ stage."""
    path = REPO / "edgeopt/convert.py"
    trees = {path: ast.parse(f"def f():\n    {line}\n")}
    assert package_import_violations(trees) + library_import_violations(trees) != []


@pytest.mark.parametrize(("line", "allowed"), [("from onnxruntime.quantization import quantize_static", True),
                                               ("q = require('onnxruntime.transformers.float16', 'x')", True),
                                               ("import onnxruntime as ort", False)])
def test_the_qdq_stage_may_use_the_graph_tool_but_not_the_runtime(line, allowed):
    path = REPO / "converters/quantize/qdq_static.py"
    tree = ast.parse(f"def f():\n    {line}\n")
    from backend_mentions import names_backend

    assert (library_import_violations({path: tree}) == []) is allowed
    assert names_backend(tree, "onnxruntime", tools_allowed(path, "onnxruntime")) is not allowed


def test_every_backend_folder_holds_its_stage_and_is_packaged():
    from edgeopt.converters.registry import BACKEND_MODULES

    packages = (REPO / "pyproject.toml").read_text()
    for backend in BACKENDS:
        assert (backend_folder(backend) / "stage.py").exists()
        assert BACKEND_MODULES[backend] == f"edgeopt.converters.backends.{backend}"
        assert f'"edgeopt.converters.backends.{backend}"' in packages


def test_mention_counter_reads_code_not_prose():
    tree = ast.parse('"""openvino in a docstring"""\n# tvm in a comment\nx = "tflite"\ndef check_tvm(): pass\n')
    from backend_mentions import names_backend

    assert not names_backend(tree, "openvino")
    assert names_backend(tree, "tflite") and names_backend(tree, "tvm")
    assert set(mentions()) == set(BACKENDS)


# backend -> the most product modules outside its own code that may name it (tests/backend_mentions.py): the
# registry and the enum, nothing else. The registry names the reference backend (``REFERENCE``), opened through its
# runner; the shared Q/DQ stage names ONNX Runtime's graph tools (``GRAPH_TOOLS``), not the backend.
MAX_MENTIONS = {"onnxruntime": 2, "openvino": 2, "tflite": 2, "tvm": 2}


def test_no_new_module_names_a_backend_outside_its_folder():
    found = {b: len(v) for b, v in mentions().items()}
    over = {b: (n, MAX_MENTIONS[b]) for b, n in found.items() if n > MAX_MENTIONS[b]}
    assert not over, f"modules naming a backend outside its folder (found, allowed): {over}; " \
                     "put the code in converters/backends/<name>/ behind its hooks (converters/hooks.py)"


def runtime_import_violations(trees: dict[Path, ast.AST]) -> list[str]:
    """Module-level imports in the device-shipped runtime package (``edgeopt/runtime/``) other than the standard
    library, numpy and its own modules (relative): the package is copied to boards alone."""
    import sys

    bad = []
    for path, tree in trees.items():
        if not path.is_relative_to(REPO / "edgeopt/runtime"):
            continue
        for node in tree.body:  # module level only: a function may import a runtime (or, host-side, the registry)
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(REPO)} imports {n}" for n in names
                    if n.split(".")[0] not in sys.stdlib_module_names | {"numpy", "__future__"}]
    return bad


def test_the_device_shipped_runtime_imports_only_the_standard_library_and_numpy_at_import():
    assert runtime_import_violations(_trees()) == []
    sample = {REPO / "edgeopt/runtime/reference.py": ast.parse("from edgeopt.converters.registry import REFERENCE\n")}
    assert runtime_import_violations(sample) != []  # the check is not vacuous
