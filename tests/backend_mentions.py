"""Which product modules name a backend, read from their syntax tree (comments and docstrings don't count).

A module names a backend when it imports one of the backend's libraries, when an identifier in it (a name, an
attribute, a function, class or keyword name) has the backend's name as one of its words (``check_openvino``,
``BackendName.TFLITE``, ``OnnxRuntimeHooks``), or when a string constant other than a docstring is the
backend's name or a module path naming it (``"openvino"``, ``"edgeopt.converters.backends.tvm"``).
``python tests/backend_mentions.py [ROOT] [--list]`` prints, for each backend, how many modules outside its own code
name it; ``--list`` (or ``-v``) then lists those modules, one ``backend: path`` a line, and the modules of the
shared Q/DQ stage that use a backend's graph tool (``GRAPH_TOOLS``), one ``tool: path`` a line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("edgeopt", "converters", "remote")  # the product's source folders (device_profiles holds no code)

# backend -> (words that name it in identifiers, libraries only it imports)
BACKENDS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "onnxruntime": (frozenset({"onnxruntime", "ort"}), ("onnxruntime",)),
    "openvino": (frozenset({"openvino", "ov", "nncf"}), ("openvino", "nncf")),
    "tflite": (frozenset({"tflite", "litert"}),
               ("tflite_runtime", "ai_edge_litert", "tensorflow", "tf_keras", "onnx2tf", "ai_edge_quantizer")),
    "tvm": (frozenset({"tvm"}), ("tvm", "tvm_ffi")),
}

# ONNX graph tools shipped inside a backend's package that are not its runtime. The shared Q/DQ stage (QDQ_STAGE,
# used by ONNX Runtime and TVM alike) writes its Q/DQ, dynamic INT8 and FP16 graphs with them: named there, they
# name that tool, not the backend. Anywhere else they count as naming the backend.
GRAPH_TOOLS: dict[str, tuple[str, ...]] = {"onnxruntime": ("onnxruntime.quantization", "onnxruntime.transformers")}
QDQ_STAGE = Path("converters/quantize")


def _words(identifier: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", identifier)
    return {w.lower() for w in re.split(r"[_\W]+", spaced) if w}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def imported_roots(tree: ast.AST) -> set[str]:
    """The top-level names of every absolute import (``import a.b``, ``from a.b import c``) in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def _is_tool(name: str, tools: tuple[str, ...]) -> bool:
    return any(name == t or name.startswith(t + ".") for t in tools)


def imported_modules(tree: ast.AST) -> set[str]:
    """The full names of every absolute import's module in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def names_backend(tree: ast.AST, backend: str, tools: tuple[str, ...] = ()) -> bool:
    """Whether ``tree`` names ``backend``; where it names one of ``tools`` (module paths of the backend's graph
    tools) it names the tool, which does not count."""
    words, libraries = BACKENDS[backend]
    if any(m.split(".")[0] in libraries and not _is_tool(m, tools) for m in imported_modules(tree)):
        return True
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and _is_tool(node.name, tools) and not node.asname:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and _is_tool(node.module, tools):
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_tool(node.value.strip(), tools):
            continue
        ident = None
        if isinstance(node, ast.Name):
            ident = node.id
        elif isinstance(node, ast.Attribute):
            ident = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            ident = node.name
        elif isinstance(node, ast.keyword) and node.arg:
            ident = node.arg
        elif isinstance(node, ast.alias):
            ident = node.asname or node.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            ident = node.module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            value = node.value.strip()
            if re.fullmatch(r"[\w.:\-]+", value) and _words(value.replace("-", "_")) & words:
                return True
        if ident and _words(ident) & words:
            return True
    return False


def product_modules(root: Path = REPO) -> list[Path]:
    return sorted(p for folder in PRODUCT for p in (root / folder).rglob("*.py"))


def backend_folder(backend: str, root: Path = REPO) -> Path:
    return root / "converters" / "backends" / backend


def own_code(path: Path, backend: str, root: Path = REPO) -> bool:
    """A backend's own code: its folder and its runner (shipped to devices)."""
    return path.is_relative_to(backend_folder(backend, root)) or path == root / "edgeopt/runtime/runners" / f"{backend}.py"


def tools_allowed(path: Path, backend: str, root: Path = REPO) -> tuple[str, ...]:
    """The graph tools of ``backend`` that ``path`` may name without naming the backend: the shared Q/DQ stage's."""
    return GRAPH_TOOLS.get(backend, ()) if path.is_relative_to(root / QDQ_STAGE) else ()


def mentions(root: Path = REPO, own=own_code) -> dict[str, list[str]]:
    """backend -> the product modules outside its own code that name it (paths relative to ``root``)."""
    trees = {p: ast.parse(p.read_text(), str(p)) for p in product_modules(root)}
    return {b: [str(p.relative_to(root)) for p, t in trees.items()
                if not own(p, b, root) and names_backend(t, b, tools_allowed(p, b, root))]
            for b in BACKENDS}


def tool_users(root: Path = REPO) -> dict[str, list[str]]:
    """graph tool -> the product modules that import or name it (paths relative to ``root``)."""
    out: dict[str, list[str]] = {t: [] for tools in GRAPH_TOOLS.values() for t in tools}
    for p in product_modules(root):
        tree = ast.parse(p.read_text(), str(p))
        named = imported_modules(tree) | {n.value.strip() for n in ast.walk(tree)
                                          if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        for tool in out:
            if any(_is_tool(m, (tool,)) for m in named):
                out[tool].append(str(p.relative_to(root)))
    return out


def largest_module(root: Path = REPO) -> tuple[str, int]:
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in product_modules(root)}
    name = max(sizes, key=sizes.get)
    return name, sizes[name]


if __name__ == "__main__":
    import json
    import sys

    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    found = mentions(Path(args[0]).resolve() if args else REPO)
    print(json.dumps({b: len(v) for b, v in found.items()}))
    if {"--list", "-v"} & set(sys.argv):
        print("\n".join(f"{b}: {m}" for b, modules in found.items() for m in modules))
        print("\n".join(f"{t}: {m}" for t, modules in tool_users().items() for m in modules))
