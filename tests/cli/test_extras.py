"""Every module imports with the core dependencies and its own extra's packages, and nothing else.

Read statically, from the source and pyproject.toml (nothing is imported, so it runs in any
venv, in well under a second): a module's *top-level* imports, followed through the spec_decode
modules it imports at top level, may reach third-party packages of the core dependencies and of
the extra the module belongs to (:data:`MODULE_EXTRAS`), nothing more; an import inside a
function (or under ``try: ... except ImportError``) is lazy, and may also reach the extras
:data:`LAZY` names for its module: the extras whose check guards the call. So the command line
(a core module) starts with core alone, and a module of ``[llama]`` imports without ``[hf]``.
The bug this guards against: ``backends/cache.py`` imported platformdirs, which only ``[hf]``
installed, so ``.[llama,qwen]`` and ``.[llama,qwen,serve]`` crashed on first use.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
SOURCE = REPOSITORY / "src"

#: Distributions whose import name is not their name with "-" as "_".
IMPORT_NAMES = {
    "llama-cpp-python": "llama_cpp",
    "openai-agents": "agents",
    "pytest-timeout": "pytest_timeout",
}
#: Packages the code imports that arrive as a dependency of a listed distribution (checked
#: against the installed metadata by :func:`test_packages_brought_along_are_real_dependencies`).
BROUGHT = {
    "fastapi": {"starlette"},
    "llama-cpp-python": {"jinja2"},
    "torch": {"jinja2"},
    "transformers": {"tokenizers", "huggingface_hub"},
}
#: The extra(s) each group of modules belongs to (the longest matching prefix wins); any other
#: module belongs to the core and must import with the core dependencies alone.
MODULE_EXTRAS = {
    "spec_decode.backends.llamacpp": {"llama"},
    "spec_decode.backends.transformers": {"hf"},
    "spec_decode.constraints": {"serve"},
    "spec_decode.serving": {"serve"},
}
#: Lazy imports of other extras, by module: what each function-level import needs, whose
#: presence the caller checks first (a backend chosen, ``--plot`` given, ``serve`` run).
LAZY = {
    "spec_decode.backends.calibration_store": {"hf"},  # torch's version, transformers only
    "spec_decode.backends.converted": {"hf"},
    "spec_decode.backends.loading": {"hf"},
    "spec_decode.backends.prompts": {"llama", "hf"},  # jinja2, from either backend's packages
    "spec_decode.certify.engines_hf": {"hf"},
    "spec_decode.certify.engines_llamacpp": {"llama"},
    "spec_decode.certify.third_party.transformers_rule": {"hf"},
    "spec_decode.certify.tiny_gguf": {"hf"},  # gguf, for the tests' and CI's tiny models
    "spec_decode.cli.calibrate": {"plot"},
    "spec_decode.cli.serve": {"serve"},
    "spec_decode.toy.plots": {"plot"},
}


@cache
def project() -> dict:
    return tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]


def dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def provided(requirements: list[str]) -> set[str]:
    """The import names these requirements make importable."""
    names: set[str] = set()
    for requirement in requirements:
        dist = dist_name(requirement)
        names.add(IMPORT_NAMES.get(dist, dist.replace("-", "_")))
        names |= BROUGHT.get(dist, set())
    return names


def allowed(extras: set[str]) -> set[str]:
    """What the core dependencies and ``extras`` make importable."""
    optional = project()["optional-dependencies"]
    return provided(project()["dependencies"] + [r for e in extras for r in optional[e]])


@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SOURCE / "spec_decode").rglob("*.py")):
        name = ".".join(path.relative_to(SOURCE).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _guards_import_error(node: ast.Try) -> bool:
    caught = " ".join(ast.unparse(h.type) for h in node.handlers if h.type is not None)
    return "ImportError" in caught or "ModuleNotFoundError" in caught


@cache
def imports(module: str) -> tuple[frozenset[str], frozenset[str]]:
    """The absolute module names ``module`` imports at top level, and lazily."""
    top: set[str] = set()
    lazy: set[str] = set()
    package = module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            inner = inner or (isinstance(child, ast.Try) and _guards_import_error(child))
            found = lazy if deferred else top
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child, inner)

    visit(ast.parse(modules()[module].read_text()), False)
    return frozenset(top), frozenset(lazy)


def third_party(names: frozenset[str] | set[str]) -> set[str]:
    tops = {name.split(".")[0] for name in names}
    return {t for t in tops if t not in sys.stdlib_module_names and t not in {"spec_decode"}}


def own(names: frozenset[str] | set[str]) -> set[str]:
    """The spec_decode modules among ``names``, with the packages above each (imported first)."""
    found = set()
    for name in names:
        parts = name.split(".")
        found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return found & modules().keys()


@cache
def closure(module: str) -> frozenset[str]:
    """Every third-party package importing ``module`` imports, through its top-level imports."""
    seen, todo, packages = {module}, [module], set()
    while todo:
        top, _ = imports(todo.pop())
        packages |= third_party(top)
        for name in own(top) - seen:
            seen.add(name)
            todo.append(name)
    return frozenset(packages)


def extras_of(module: str) -> set[str]:
    prefixes = [p for p in MODULE_EXTRAS if module == p or module.startswith(p + ".")]
    return MODULE_EXTRAS[max(prefixes, key=len)] if prefixes else set()


def test_the_command_line_starts_with_the_core_dependencies_alone():
    assert allowed(set()) >= closure("spec_decode.cli.app")
    assert "platformdirs" in allowed(set())  # the user cache, on every backend's path


def test_each_module_imports_with_the_core_and_its_own_extra():
    wrong = {
        module: sorted(closure(module) - allowed(extras_of(module)))
        for module in modules()
        if closure(module) - allowed(extras_of(module))
    }
    assert wrong == {}, "imported at top level beyond the module's extra (see MODULE_EXTRAS)"


def test_lazy_imports_need_only_a_declared_extra():
    wrong = {}
    for module in modules():
        extras = extras_of(module) | LAZY.get(module, set())
        beyond = third_party(imports(module)[1]) - allowed(extras)
        if beyond:
            wrong[module] = sorted(beyond)
    assert wrong == {}, "a lazy import of an extra this module does not declare (see LAZY)"


def test_every_package_imported_is_installed_by_some_extra():
    everything = allowed(set(project()["optional-dependencies"]))
    imported = set().union(*(third_party(imports(m)[0] | imports(m)[1]) for m in modules()))
    assert imported - everything == set()


def test_the_tables_name_real_modules_and_extras():
    extras = set(project()["optional-dependencies"])
    for table in (MODULE_EXTRAS, LAZY):
        assert set(table) <= modules().keys()
        assert set().union(*table.values()) <= extras
    assert all(LAZY[m] - extras_of(m) for m in LAZY), "a LAZY entry its group already gives"


@pytest.mark.parametrize("dist", sorted(BROUGHT))
def test_packages_brought_along_are_real_dependencies(dist):
    try:
        requires = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed here")
    hard = {dist_name(r).replace("-", "_") for r in requires if "extra ==" not in r}
    assert BROUGHT[dist] <= hard
