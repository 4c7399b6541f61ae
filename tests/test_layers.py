"""The layers point one way: read every import of the package (module level and inside
functions) and check that core imports nothing else from spec_decode and no two packages import
each other, directly or through others; bench scripts share code only through bench.lib; and no
module or function grows past what one job needs."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import spec_decode

PACKAGE_ROOT = Path(spec_decode.__file__).parent


def layer_of(module: str) -> str:
    """The subpackage (``core``, ``drafting``, ...) or top-level module a dotted name lives in."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "spec_decode"


def imports_by_layer() -> dict[str, dict[str, list[str]]]:
    """``{layer: {imported layer: ["file:line", ...]}}`` for every import of spec_decode."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in PACKAGE_ROOT.rglob("*.py"):
        relative = path.relative_to(PACKAGE_ROOT.parent).with_suffix("")
        source = layer_of(".".join(relative.parts))
        if relative.name == "__init__" and len(relative.parts) == 2:
            source = "spec_decode"  # the package facade re-exports from every layer
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                target = layer_of(name)
                if name.startswith("spec_decode.") and target != source:
                    edges[source][target].append(f"{relative}:{node.lineno}")
    return edges


def reachable(edges: dict[str, dict[str, list[str]]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for target in edges.get(stack.pop(), {}):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_core_imports_nothing_above_it():
    assert dict(imports_by_layer().get("core", {})) == {}


def test_no_two_layers_import_each_other():
    edges = imports_by_layer()
    cycles = [
        (source, target, where[:3])
        for source, targets in edges.items()
        if source != "spec_decode"
        for target, where in targets.items()
        if source in reachable(edges, target)
    ]
    assert cycles == []


def test_importing_the_package_loads_numpy_only():
    heavy = ("scipy", "torch", "transformers", "llama_cpp", "typer", "rich", "fastapi")
    code = f"import sys, spec_decode; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


BENCH = Path(__file__).resolve().parents[1] / "bench"
BENCH_LIB = BENCH / "lib"


def bench_scripts() -> list[Path]:
    """Every benchmark script: the modules under bench/ outside bench/lib, packages' own
    ``__init__`` aside."""
    return [
        path
        for path in sorted(BENCH.rglob("*.py"))
        if BENCH_LIB not in path.parents and path.name != "__init__.py"
    ]


def imported_names(path: Path) -> list[tuple[int, str, int]]:
    """``(line, dotted name, relative level)`` of every import in ``path``: ``import a.b`` as
    ``a.b``, ``from a import b`` as ``a.b``, module level and inside functions."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            prefix = f"{node.module}." if node.module else ""
            names += [(node.lineno, prefix + alias.name, node.level) for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [(node.lineno, alias.name, 0) for alias in node.names]
    return names


def test_bench_scripts_live_in_group_folders():
    """Scripts are grouped by what they measure (bench/GROUP/NAME.py); bench/ itself holds the
    package's ``__init__``, bench/lib and bench/results only."""
    scripts = bench_scripts()
    assert scripts
    assert [path.name for path in scripts if path.parent == BENCH] == []


def test_no_bench_script_imports_another():
    """bench/ scripts share code only through bench.lib, never by importing another script:
    not by its bare name (a script's own folder is on sys.path when it runs), not by its module
    path (``bench.GROUP.NAME``), not relatively. bench.lib imports no script either."""
    stems = {path.stem for path in bench_scripts()}
    offending = []
    for path in sorted(BENCH.rglob("*.py")):
        for line, name, level in imported_names(path):
            top, *rest = name.split(".")
            if level or top in stems or (top == "bench" and rest[:1] != ["lib"]):
                offending.append(f"{path.relative_to(BENCH)}:{line} imports {name}")
    assert offending == []


REPOSITORY = Path(__file__).resolve().parents[1]
#: The most lines a module (the package's, a benchmark's, a test file) and a function may have:
#: past them a file holds more than one job and a function more than one step.
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 350, 80


def test_modules_and_functions_stay_small():
    too_long = []
    for folder in (PACKAGE_ROOT, BENCH, REPOSITORY / "tests"):
        for path in folder.rglob("*.py"):
            text = path.read_text()
            if text.count("\n") > MAX_MODULE_LINES:
                too_long.append(f"{path.relative_to(REPOSITORY)}: {text.count(chr(10))} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        where = f"{path.relative_to(REPOSITORY)}:{node.lineno}"
                        too_long.append(f"{where} {node.name}: {length} lines")
    assert too_long == []
