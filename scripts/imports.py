"""The import structure of a baked project's package: which of its modules import which, the
circles among them, and the imports that run back up from the core into the project.

    python scripts/imports.py                  # bakes the research size into a scratch folder
    python scripts/imports.py --scope teaching
    python scripts/imports.py --project PATH   # a project already baked (or grown, or edited)
    python scripts/imports.py --json F         # and the figures as JSON

Every import statement counts, those inside functions too (a late import still ties the modules):
an import circle is a set of modules each reachable from the others. The core's modules are those
scripts/vendor_core.py vendors; an import "back up" is one from a core module to a module of the
project that is not core. Standard library and cookiecutter only.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from vendor_core import VENDORED  # noqa: E402


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "__init__"


def imported_modules(path: Path, package: Path, modules: set[str]) -> set[str]:
    """The package's own modules that `path` imports (relative imports, and absolute ones of the
    package by its name), each as a name relative to the package ("engine.plan", "__init__")."""
    folder = list(path.parent.relative_to(package).parts)  # the (sub)package the file is in
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = [*folder[: len(folder) - (node.level - 1)], *(node.module or "").split(".")]
            elif node.module and node.module.split(".")[0] == package.name:
                base = node.module.split(".")[1:]
            else:
                continue
            stem = ".".join(part for part in base if part)
            for alias in node.names:  # `from . import task` names a module; `from .x import f` names x
                name = f"{stem}.{alias.name}" if stem else alias.name
                found.add(name if name in modules else (stem or "__init__"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package.name:
                    found.add(".".join(alias.name.split(".")[1:]) or "__init__")
    found.discard(module_name(path, package))
    return found


def graph(package: Path) -> dict[str, set[str]]:
    files = sorted(package.rglob("*.py"))
    modules = {module_name(path, package) for path in files}
    return {module_name(path, package): imported_modules(path, package, modules) for path in files}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def structure(package: Path) -> dict:
    edges = graph(package)
    core = {path[: -len(".py")].replace("/", ".").removesuffix(".__init__") for path in VENDORED}
    back_up = sorted(f"{source} -> {target}" for source, targets in edges.items() if source in core
                     for target in targets if target not in core)
    return {"modules": len(edges), "core_modules": sorted(core & set(edges)),
            "imports": sum(len(targets) for targets in edges.values()),
            "circles": circles(edges), "imports_back_up_from_the_core": back_up}


def bake(scope: str, folder: Path) -> Path:
    from cookiecutter.main import cookiecutter

    return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(folder),
                             extra_context={"scope": scope, "init_git": False}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scope", choices=["research", "teaching"], default="research")
    parser.add_argument("--project", type=Path, help="a baked project (default: bake one of --scope)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        project = args.project or bake(args.scope, Path(scratch))
        packages = [path.parent for path in (project / "src").glob("*/__init__.py")]
        found = structure(packages[0])
    print(f"{found['modules']} modules ({len(found['core_modules'])} of the core), {found['imports']} imports "
          "between them")
    print(f"circles: {len(found['circles'])}")
    for circle in found["circles"]:
        print("  " + " <-> ".join(circle))
    print(f"imports back up from the core into the project: {len(found['imports_back_up_from_the_core'])}")
    for line in found["imports_back_up_from_the_core"]:
        print("  " + line)
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
