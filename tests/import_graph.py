"""The imports of a package folder read from its source with ``ast`` (nothing is imported): what the
layering and family-boundary tests check the rooms of core against.

Every import statement counts, wherever it stands (inside a function, under ``TYPE_CHECKING``), as
a structural tool reads the house. ``from package import name`` names the submodule
``package.name`` where that is a known module, else ``package``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path


def module_name(path: Path, root: Path, package: str = "framewise") -> str:
    """``root/core/families/base.py`` -> ``framewise.core.families.base``; a package's
    ``__init__.py`` is the package itself."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def modules_under(folder: Path, root: Path) -> dict[str, Path]:
    """Every module of ``folder`` (recursively) by its import name."""
    return {module_name(path, root): path for path in sorted(folder.rglob("*.py"))}


def imported_names(path: Path, own_name: str, known: set[str]) -> Iterator[str]:
    """Each module an import statement of ``path`` (module ``own_name``) names: ``import a.b`` names
    ``a.b``; ``from a import b`` names ``a.b`` where that is among ``known``, else ``a``."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = own_name.split(".")
                anchor = parts[: len(parts) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in known else base


def import_graph(modules: Mapping[str, Path], known: set[str] | None = None) -> dict[str, set[str]]:
    """Module -> the modules among ``known`` (default: ``modules``) it imports, itself left out."""
    known = set(modules) if known is None else known
    return {
        name: {imported for imported in imported_names(path, name, known) if imported in known and imported != name}
        for name, path in modules.items()
    }


def first_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as the modules along it (the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def outside_imports(
    modules: Mapping[str, Path], allowed_prefixes: tuple[str, ...], known: set[str]
) -> dict[str, list[str]]:
    """The Framewise modules (among ``known``) each of ``modules`` imports that start with none of
    ``allowed_prefixes``."""
    found = {}
    for name, path in modules.items():
        names = {imported for imported in imported_names(path, name, known) if imported in known}
        wrong = sorted(imported for imported in names if not imported.startswith(allowed_prefixes))
        if wrong:
            found[name] = wrong
    return found
