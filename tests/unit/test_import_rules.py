"""The layering of README.md's Layout section, checked on the source: every .py under libs/ and
services/ is parsed with `ast` (nothing is imported), every import read — at module level and inside
functions alike, a cycle is a cycle — except those under `if TYPE_CHECKING:`.

- the domain is pure: nothing under libs/sluice/domain imports Sluice's infrastructure;
- the library never imports the services (the services extend the library, not the other way);
- no import cycles among the library's modules, nor among the services' (the cycle's path is reported).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"sluice": ROOT / "libs" / "sluice", "sluice_services": ROOT / "services"}
"""Top-level package -> its folder (pyproject.toml's package-dir)."""

DOMAIN_MAY_NOT_IMPORT = (
    "sluice.runtime", "sluice.eventlog", "sluice.bus", "sluice.wire", "sluice.v1", "sluice.cli",
    "sluice.sdk", "sluice_services",
)


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def _module_name(path: Path) -> str:
    for package, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(path)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for folder in PACKAGES.values() for path in sorted(folder.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST):
    """Every Import/ImportFrom below `node`, skipping the bodies of `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _import_nodes(child)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno) for alias in node.names)
            continue
        if node.level:
            base = name.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            found.append(Import(name, submodule if submodule in modules else target, node.lineno))
    return found


def _graph() -> tuple[dict[str, Path], list[Import]]:
    modules = _modules()
    return modules, [imp for name, path in modules.items() for imp in _imports(name, path, modules)]


def _within(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _cycles(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path per strongly connected component of more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (the graph is a few hundred modules deep at most)
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    components.append(component)

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return [_path_in(component, edges) for component in components]


def _path_in(component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first back to it)."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, ()) & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(component)


def _describe(imports: list[Import], modules: dict[str, Path]) -> str:
    lines = dict.fromkeys(f"  {modules[imp.importer].relative_to(ROOT)}:{imp.line} imports {imp.imported}" for imp in imports)
    return "\n".join(lines)


def test_the_domain_imports_nothing_of_the_infrastructure():
    modules, imports = _graph()
    bad = [imp for imp in imports if _within(imp.importer, "sluice.domain") and _within(imp.imported, DOMAIN_MAY_NOT_IMPORT)]
    assert not bad, "the domain is pure; these imports belong on the persistence or service side:\n" + _describe(bad, modules)


def test_the_library_never_imports_the_services():
    modules, imports = _graph()
    bad = [imp for imp in imports if _within(imp.importer, "sluice") and _within(imp.imported, "sluice_services")]
    assert not bad, "libs/sluice may not import sluice_services (services extend the library):\n" + _describe(bad, modules)


@pytest.mark.parametrize("one, other", [("sluice_services.launcher", "sluice_services.datasets"),
                                        ("sluice_services.datasets", "sluice_services.launcher")])
def test_the_launcher_and_the_datasets_service_share_no_code(one, other):
    """They talk through the datasets service's gRPC API (launcher/run_data.py is the launcher's port);
    what both need lives in the library (sluice.datasets.files, sluice.domain)."""
    modules, imports = _graph()
    bad = [imp for imp in imports if _within(imp.importer, one) and _within(imp.imported, other)]
    assert not bad, f"{one} may not import {other}:\n" + _describe(bad, modules)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycles(package):
    modules, imports = _graph()
    inside = {name for name in modules if _within(name, package)}
    edges: dict[str, set[str]] = {}
    for imp in imports:
        if imp.importer in inside and imp.imported in inside:
            edges.setdefault(imp.importer, set()).add(imp.imported)
    cycles = _cycles(inside, edges)
    assert not cycles, f"import cycles in {package} (break each by moving the shared piece where both can import it):\n" + \
        "\n".join("  " + " -> ".join(cycle) for cycle in cycles)


def test_the_checker_sees_a_cycle_and_a_forbidden_import():
    """The rules above pass because the code obeys them, not because the parser reads nothing."""
    modules, imports = _graph()
    assert len(modules) > 100 and len(imports) > 500
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(set(edges), edges) == [["a", "b", "c", "a"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    assert [alias.name for node in _import_nodes(tree) for alias in node.names] == ["TYPE_CHECKING", "y"]


def test_the_catalogue_is_what_composition_and_the_services_use():
    """One list: composition builds a spec per catalogued service with the catalogued factory, and
    routes the catalogued streams."""
    import inspect

    from sluice_services import catalogue, composition

    assert composition.SERVICES == catalogue.NAMES
    source = inspect.getsource(composition.build)
    for service in catalogue.CATALOGUE:
        assert f'"{service.name}": lambda: {service.spec}(' in source
        assert callable(getattr(composition, service.spec))
