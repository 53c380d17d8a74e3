"""Breaks of the generated code, described once in breaks/*.toml, made into patches or applied.

    python scripts/breaks.py patches          # rewrites every exercise's break.patch from breaks/exercises.toml
    python scripts/breaks.py patches --check  # exit 1, naming them, if a committed patch is not the one it gives
    python scripts/breaks.py kill-ratio       # each mutation against whole tiers of the generated suite
    python scripts/breaks.py kill-ratio --only NAME,NAME   # those again (new ones), the rest kept

A break replaces one piece of text inside one function (or method, `Class.method`) of one file of
the package: the text must be there exactly once, so that a change to the code that moves or
rewrites it makes this script fail, naming the break to update, instead of a patch that silently no
longer applies. tests/test_exercises.py (the exercises) and tests/test_mutations.py (the mutation
suite) use the same functions.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
BREAKS = ROOT / "breaks"
EXERCISES = ROOT / "{{cookiecutter.project_slug}}" / "exercises"
SLUG = "{{ cookiecutter.project_slug }}"
TARGET_SLUG = "break_target"  # the package name of the project the patches are made against


@dataclass(frozen=True)
class Break:
    name: str
    file: str  # relative to src/<package>/
    function: str  # "name" or "Class.method"
    replace: str
    with_: str
    caught_by: str  # a test id, tests/test_x.py::test_y
    gpu_only: bool = False
    why: str = ""  # for the mutation suite: what a contributor might have meant by it
    scope: str | None = None  # the project size whose code it breaks; None: a file both sizes share


def load(kind: str) -> list[Break]:
    """The breaks of breaks/<kind>.toml, in order."""
    entries = tomllib.loads((BREAKS / f"{kind}.toml").read_text(encoding="utf-8"))["break"]
    return [Break(name=e["name"], file=e["file"], function=e["function"], replace=e["replace"], with_=e["with"],
                  caught_by=e["caught_by"], gpu_only=e.get("gpu_only", False), why=e.get("why", ""),
                  scope=e.get("scope")) for e in entries]


SCOPES = ("research", "teaching")


def patch_file(brk: Break, breaks: list[Break]) -> str:
    """The name of the template file that holds `brk`'s patch, in its exercise's folder: break.patch,
    or, for an exercise with an entry per size, a name that renders empty in a project of the other
    size (as the per-language READMEs do)."""
    sizes = [other.scope for other in breaks if other.name == brk.name]
    if len(sizes) == 1:
        return "break.patch"
    return f"{{% if cookiecutter.scope == '{brk.scope}' %}}break.patch{{% endif %}}"


def sizes_of(name: str, breaks: list[Break]) -> list[str]:
    """The project sizes that have exercise `name`."""
    scopes = [brk.scope for brk in breaks if brk.name == name]
    return list(SCOPES) if None in scopes else [scope for scope in SCOPES if scope in scopes]


def function_span(source: str, function: str) -> tuple[int, int]:
    """(first, last) line numbers, 1-based, of `function` ("name" or "Class.method") in `source`."""
    scope: list = ast.parse(source).body
    node = None
    for part in function.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise LookupError(f"no {function} in the file")
        scope = node.body
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return start, node.end_lineno


def broken(source: str, brk: Break) -> str:
    """`source` with the break applied; LookupError (one line) if its text is not there exactly once."""
    first, last = function_span(source, brk.function)
    lines = source.splitlines(keepends=True)
    before, body, after = "".join(lines[: first - 1]), "".join(lines[first - 1 : last]), "".join(lines[last:])
    if body.count(brk.replace) != 1:
        raise LookupError(f"break {brk.name}: its text occurs {body.count(brk.replace)} times in {brk.function} of "
                          f"{brk.file}, not once: update its entry in breaks/")
    return before + body.replace(brk.replace, brk.with_) + after


def apply(project: Path, brk: Break) -> tuple[Path, str]:
    """Applies `brk` to a baked project in place; returns (the file, its text before) to undo it."""
    path = project / "src" / project.name / brk.file
    original = path.read_text(encoding="utf-8")
    path.write_text(broken(original, brk), encoding="utf-8")
    return path, original


def patch_of(project: Path, brk: Break) -> str:
    """The break as a patch for `git apply`, against the project's package, with the package name
    written as the template's placeholder so that it fits any baked project."""
    package = project.name
    relative = f"src/{package}/{brk.file}"
    original = (project / relative).read_text(encoding="utf-8")
    diff = difflib.unified_diff(original.splitlines(keepends=True), broken(original, brk).splitlines(keepends=True),
                                f"a/{relative}", f"b/{relative}", n=3)
    text = f"diff --git a/{relative} b/{relative}\n" + "".join(diff)
    return text.replace(package, SLUG)


def bake(folder: Path, scope: str = "research") -> Path:
    """The template as it is in this working tree, baked with its defaults (package TARGET_SLUG) at
    the size `scope`, into `folder`/`scope`/."""
    from cookiecutter.main import cookiecutter

    return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(folder / scope),
                             extra_context={"project_name": TARGET_SLUG, "init_git": False, "scope": scope}))


def patches(check: bool) -> int:
    stale, exercises = [], load("exercises")
    with tempfile.TemporaryDirectory() as scratch:
        projects = {scope: bake(Path(scratch), scope) for scope in SCOPES}
        for brk in exercises:
            path = EXERCISES / brk.name / patch_file(brk, exercises)
            try:
                text = patch_of(projects[brk.scope or "research"], brk)
                if brk.scope is None and patch_of(projects["teaching"], brk) != text:
                    raise LookupError(f"break {brk.name}: its patch differs between the sizes; give it an entry "
                                      "per size (scope = ...) in breaks/exercises.toml")
            except LookupError as error:
                print(f"error: {error}", file=sys.stderr)
                return 1
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.relative_to(EXERCISES).as_posix())
                if not check:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text, encoding="utf-8")
    if check and stale:
        print(f"error: these patches are not what breaks/exercises.toml gives: {', '.join(stale)}; "
              "run: python scripts/breaks.py patches", file=sys.stderr)
        return 1
    print(f"{'checked' if check else 'wrote'} {len(exercises)} patches" +
          (f" ({len(stale)} changed)" if stale and not check else ""))
    return 0


TIERS = {"plain": [], "distributed": ["-m", "distributed"], "slow": ["-m", "slow"]}


def killed_by(project: Path, brk: Break, tier: list[str]) -> bool:
    """Whether the tier's suite fails with `brk` applied. First the break's own test, with the
    tier's markers (so a test the tier leaves out is left out): if it fails, the tier fails, at
    the cost of that one test. Otherwise the whole tier, stopping at its first failure."""
    path, original = apply(project, brk)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tier]
    try:
        own = subprocess.run([*command, brk.caught_by], cwd=project, capture_output=True, text=True, timeout=3600)
        if own.returncode == 1:  # 1: tests failed (5 would be: the tier does not hold the test)
            return True
        result = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=3600)
    finally:
        path.write_text(original, encoding="utf-8")
    return result.returncode != 0


def kill_ratio(output: Path, only: list[str]) -> int:
    """Every mutation (or those named in `only`, the others kept from `output`) against the plain
    tier, and the survivors against the other two; a JSON record of who caught what, and the
    ratios, into `output`. The unbroken project must pass the plain tier first: else every break
    would count as caught."""
    mutations = load("mutations")
    names = [brk.name for brk in mutations]
    unknown = sorted(set(only) - set(names))
    if unknown:
        print(f"error: no such break in breaks/mutations.toml: {', '.join(unknown)}", file=sys.stderr)
        return 2
    earlier = json.loads(output.read_text(encoding="utf-8"))["caught"] if only and output.exists() else {}
    record = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "command": "python scripts/breaks.py kill-ratio", "caught": {}}
    with tempfile.TemporaryDirectory() as scratch:
        project = bake(Path(scratch))
        unbroken = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"],
                                  cwd=project, capture_output=True, text=True, timeout=3600)
        if unbroken.returncode != 0:
            print(f"error: the unbroken project fails its plain tier:\n{unbroken.stdout[-3000:]}", file=sys.stderr)
            return 1
        for brk in mutations:
            if only and brk.name not in only:
                if brk.name not in earlier:
                    print(f"error: {output} has no result for {brk.name}; run it too", file=sys.stderr)
                    return 2
                record["caught"][brk.name] = earlier[brk.name]
                continue
            caught = next((name for name, tier in TIERS.items() if killed_by(project, brk, tier)), None)
            record["caught"][brk.name] = caught
            print(f"{brk.name}: {caught or 'SURVIVED'}", flush=True)
    caught = record["caught"].values()
    record["plain"] = f"{sum(c == 'plain' for c in caught)}/{len(mutations)}"
    record["all_tiers"] = f"{sum(c is not None for c in caught)}/{len(mutations)}"
    output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"plain pytest: {record['plain']}; all tiers: {record['all_tiers']} -> {output}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["patches", "kill-ratio"])
    parser.add_argument("--check", action="store_true", help="patches: only compare; change nothing")
    parser.add_argument("--out", type=Path, default=BREAKS / "kill-ratio.json", help="kill-ratio: the record")
    parser.add_argument("--only", default="", help="kill-ratio: these breaks (comma-separated) run again, the "
                        "others' results kept from --out")
    args = parser.parse_args()
    if args.command == "patches":
        return patches(args.check)
    return kill_ratio(args.out, [name for name in args.only.split(",") if name])


if __name__ == "__main__":
    sys.exit(main())
