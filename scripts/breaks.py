"""Breaks of the generated code, described once in breaks/*.toml, made into patches or applied.

    python scripts/breaks.py patches          # rewrites every exercise's break.patch from breaks/exercises.toml
    python scripts/breaks.py patches --check  # exit 1, naming them, if a committed patch is not the one it gives
    python scripts/breaks.py kill-ratio       # each mutation against whole tiers of the generated suite
    python scripts/breaks.py kill-ratio --only NAME,NAME   # those again (new ones), the rest kept
    python scripts/breaks.py kill-ratio --set independent  # the independent round's breaks, written from the docs
    python scripts/breaks.py kill-ratio --set independent --resume   # those it has no result for yet
    python scripts/breaks.py kill-ratio --set independent --survivors --tiers distributed,slow   # its survivors
    python scripts/breaks.py kill-ratio --set independent-teaching --tiers plain   # the teaching size's round
    python scripts/breaks.py kill-ratio --set independent-teaching-2 --tiers plain # its second, fresh round
    python scripts/breaks.py kill-ratio --set independent-teaching-3 --tiers plain # its third
    python scripts/breaks.py kill-ratio --set independent-teaching-4 --tiers plain # its fourth
    python scripts/breaks.py kill-ratio --set independent-teaching-5 --tiers plain # its fifth
    python scripts/breaks.py kill-ratio --set independent-teaching-6 --tiers plain # its sixth
    python scripts/breaks.py kill-ratio --set independent-teaching-7 --tiers plain # its seventh
    python scripts/breaks.py kill-ratio --set independent-teaching-8 --tiers plain # its eighth
    python scripts/breaks.py kill-ratio --set independent-teaching-9 --tiers plain # its ninth
    python scripts/breaks.py kill-ratio --set independent-teaching-10 --tiers plain # its tenth
    python scripts/breaks.py kill-ratio --set independent-teaching-11 --tiers plain # its eleventh
    python scripts/breaks.py kill-ratio --set independent-teaching-12 --tiers plain # its twelfth
    python scripts/breaks.py kill-ratio --set independent-2 --tiers plain   # the research size's second round
    python scripts/breaks.py kill-ratio --set independent-3 --tiers plain   # its third
    python scripts/breaks.py kill-ratio --set independent-4 --tiers plain   # its fourth
    python scripts/breaks.py kill-ratio --set independent-5 --tiers plain   # its fifth
    python scripts/breaks.py kill-ratio --set independent-6 --tiers plain   # its sixth
    python scripts/breaks.py kill-ratio --set independent-7 --tiers plain   # its seventh
    python scripts/breaks.py core-catches     # the mutation suite's breaks of core files, each against core/tests/
    python scripts/breaks.py core-catches --set independent-core   # the core's independent round, recorded
    python scripts/breaks.py core-catches --set independent-core-2 # its second, of core/src/repro_core/engine/
    python scripts/breaks.py core-catches --set independent-core-3 # its third, one break in each of 16 modules
    python scripts/breaks.py core-catches --set independent-core-4 # its fourth, the same way
    python scripts/breaks.py core-catches --set independent-core-5 # its fifth
    python scripts/breaks.py core-catches --set independent-core-6 # its sixth
    python scripts/breaks.py core-catches --set independent-core-7 # its seventh
    python scripts/breaks.py core-catches --set independent-core-8 # its eighth
    python scripts/breaks.py core-catches --set independent-core-9 # its ninth
    python scripts/breaks.py core-catches --set independent-core-10 # its tenth
    python scripts/breaks.py core-catches --set independent-core-11 # its eleventh
    python scripts/breaks.py core-catches --set independent-core-12 # its twelfth

A break replaces one piece of text inside one function (or method, `Class.method`; `<module>` for a
statement outside any) of one file of the package: the text must be there exactly once, so that a
change to the code that moves or rewrites it makes this script fail, naming the break to update,
instead of a patch that silently no longer applies. tests/test_exercises.py (the exercises) and
tests/test_mutations.py (the mutation suite) use the same functions.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    caught_by: str = ""  # a test id, tests/test_x.py::test_y; "": none named, the files naming the function go first
    gpu_only: bool = False
    why: str = ""  # for the mutation suite: what a contributor might have meant by it
    scope: str | None = None  # the project size whose code it breaks; None: a file both sizes share
    core_caught_by: str = ""  # the mutation suite: the core's test that catches it too, run against the core alone


def load(kind: str) -> list[Break]:
    """The breaks of breaks/<kind>.toml, in order."""
    entries = tomllib.loads((BREAKS / f"{kind}.toml").read_text(encoding="utf-8"))["break"]
    return [Break(name=e["name"], file=e["file"], function=e["function"], replace=e["replace"], with_=e["with"],
                  caught_by=e.get("caught_by", ""), gpu_only=e.get("gpu_only", False), why=e.get("why", ""),
                  scope=e.get("scope"), core_caught_by=e.get("core_caught_by", "")) for e in entries]


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
    """(first, last) line numbers, 1-based, of `function` ("name" or "Class.method") in `source`;
    "<module>": the whole file, for a statement at its top level (an `if` of a package's __init__)."""
    scope: list = ast.parse(source).body
    if function == "<module>":
        return 1, len(source.splitlines())
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


# The plain tier in this one forked process (`-n 0`): a research bake's plain `pytest` would start
# pytest-xdist's workers, fresh interpreters that import torch again, where a break needs the first
# failure only.
TIERS = {"plain": ["-n", "0"], "distributed": ["-m", "distributed"], "slow": ["-m", "slow"]}
SETS = {"mutations": "kill-ratio.json", "independent": "kill-ratio-independent.json",
        "independent-teaching": "kill-ratio-independent-teaching.json",
        "independent-teaching-2": "kill-ratio-independent-teaching-2.json",
        "independent-teaching-3": "kill-ratio-independent-teaching-3.json",
        "independent-teaching-4": "kill-ratio-independent-teaching-4.json",
        "independent-teaching-5": "kill-ratio-independent-teaching-5.json",
        "independent-teaching-6": "kill-ratio-independent-teaching-6.json",
        "independent-teaching-7": "kill-ratio-independent-teaching-7.json",
        "independent-teaching-8": "kill-ratio-independent-teaching-8.json",
        "independent-teaching-9": "kill-ratio-independent-teaching-9.json",
        "independent-teaching-10": "kill-ratio-independent-teaching-10.json",
        "independent-teaching-11": "kill-ratio-independent-teaching-11.json",
        "independent-teaching-12": "kill-ratio-independent-teaching-12.json",
        "independent-teaching-13": "kill-ratio-independent-teaching-13.json",
        "independent-2": "kill-ratio-independent-2.json", "independent-3": "kill-ratio-independent-3.json",
        "independent-4": "kill-ratio-independent-4.json", "independent-5": "kill-ratio-independent-5.json",
        "independent-6": "kill-ratio-independent-6.json", "independent-7": "kill-ratio-independent-7.json",
        "independent-core": "kill-ratio-independent-core.json",
        "independent-core-2": "kill-ratio-independent-core-2.json",
        "independent-core-3": "kill-ratio-independent-core-3.json",
        "independent-core-4": "kill-ratio-independent-core-4.json",
        "independent-core-5": "kill-ratio-independent-core-5.json",
        "independent-core-6": "kill-ratio-independent-core-6.json",
        "independent-core-7": "kill-ratio-independent-core-7.json",
        "independent-core-8": "kill-ratio-independent-core-8.json",
        "independent-core-9": "kill-ratio-independent-core-9.json",
        "independent-core-10": "kill-ratio-independent-core-10.json",
        "independent-core-11": "kill-ratio-independent-core-11.json",
        "independent-core-12": "kill-ratio-independent-core-12.json",
        "independent-core-13": "kill-ratio-independent-core-13.json"}
# The size a set breaks; the others break the research size, but CORE_SETS', which break core/
# itself and are tried by core-catches against core/tests/ alone.
SCOPE_OF = {"independent-teaching": "teaching", "independent-teaching-2": "teaching",
            "independent-teaching-3": "teaching", "independent-teaching-4": "teaching",
            "independent-teaching-5": "teaching", "independent-teaching-6": "teaching",
            "independent-teaching-7": "teaching", "independent-teaching-8": "teaching",
            "independent-teaching-9": "teaching", "independent-teaching-10": "teaching",
            "independent-teaching-11": "teaching", "independent-teaching-12": "teaching",
            "independent-teaching-13": "teaching"}
# core-catches' rounds: breaks of core/ itself.
CORE_SETS = ("independent-core", "independent-core-2", "independent-core-3", "independent-core-4",
             "independent-core-5", "independent-core-6", "independent-core-7", "independent-core-8",
             "independent-core-9", "independent-core-10", "independent-core-11", "independent-core-12",
             "independent-core-13")


def nearby_tests(project: Path, brk: Break) -> list[str]:
    """The test files that name the function a break changes (for a break that names no test of its
    own, as the independent round's do): a cheap first try before the whole tier."""
    word = brk.function.split(".")[-1]
    return sorted(f"tests/{path.name}" for path in (project / "tests").glob("test_*.py")
                  if word in path.read_text(encoding="utf-8"))


def first_failure(output: str) -> str:
    """The id of the first test pytest's summary names as failed (or in error)."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ", 1)[0]
    return "?"


def killed_by(project: Path, brk: Break, tier: list[str]) -> str | None:
    """The test that fails first in the tier's suite with `brk` applied, or None if the tier passes.
    First the break's own test (or, if it names none, the test files that name its function), with
    the tier's markers (so a test the tier leaves out is left out): if it fails, the tier fails, at
    the cost of those tests. Otherwise the whole tier, stopping at its first failure."""
    path, original = apply(project, brk)
    command = ["-q", "-x", "-p", "no:cacheprovider", "-rfE", *tier]
    first = [brk.caught_by] if brk.caught_by else nearby_tests(project, brk)
    try:
        if first:
            own = run_pytest(project, [*command, *first], timeout=3600)
            if own.returncode == 1:  # 1: tests failed (5 would be: the tier does not hold the test)
                return first_failure(own.stdout)
        result = run_pytest(project, command, timeout=3600)
    finally:
        path.write_text(original, encoding="utf-8")
    return first_failure(result.stdout) if result.returncode != 0 else None


def kill_ratio(kind: str, output: Path, only: list[str], jobs: int, resume: bool, tiers: list[str],
               survivors: bool = False) -> int:
    """Every break of breaks/`kind`.toml (or those named in `only`, the others kept from `output`;
    with `resume`, those `output` has no result for) against the plain tier, and the survivors
    against the other two; a JSON record of who caught what, and the ratios, into `output`, written
    again after each break (so that a long round can be stopped and resumed). The unbroken project
    must pass each tier tried first: else every break would count as caught. `jobs` breaks run at a
    time, each in a bake of its own; `tiers`, the tiers tried (all three, unless a round must be
    cut short: then a survivor of them all is recorded as caught by none, and the record says
    which it tried). With `survivors`, the breaks that `output` records as caught by none of its
    tiers are tried against `tiers` (others than its own), each against those it has not met yet;
    "survivors_tiers" says which each has met, so that such a round too goes on where it stopped."""
    mutations = load(kind)
    names = [brk.name for brk in mutations]
    unknown = sorted(set(only) - set(names))
    if unknown:
        print(f"error: no such break in breaks/{kind}.toml: {', '.join(unknown)}", file=sys.stderr)
        return 2
    reading = only or resume or survivors
    earlier = json.loads(output.read_text(encoding="utf-8")) if reading and output.exists() else {}
    command = "python scripts/breaks.py kill-ratio" + ("" if kind == "mutations" else f" --set {kind}")
    record = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "command": command, "tiers": tiers, "caught": {}, "first_failure": {}}
    if survivors:
        if not earlier:
            print(f"error: {output} holds no round whose survivors could be tried", file=sys.stderr)
            return 2
        met = sorted(set(tiers) & set(earlier.get("tiers", TIERS)))
        if met:
            print(f"error: every break of {output} met the tier {', '.join(met)} already", file=sys.stderr)
            return 2
        record.update(tiers=earlier.get("tiers", list(TIERS)), caught=dict(earlier["caught"]),
                      first_failure=dict(earlier["first_failure"]),
                      survivors_tiers=dict(earlier.get("survivors_tiers", {})))
        left = {name: [tier for tier in tiers if tier not in record["survivors_tiers"].get(name, [])]
                for name, tier in record["caught"].items() if tier is None}
    else:
        if earlier and earlier.get("tiers", list(TIERS)) != tiers:
            print(f"error: {output} tried the tiers {earlier.get('tiers')}, not {tiers}", file=sys.stderr)
            return 2
        for brk in mutations:
            if (only and brk.name not in only) or (resume and brk.name in earlier.get("caught", {})):
                if brk.name not in earlier.get("caught", {}):
                    print(f"error: {output} has no result for {brk.name}; run it too", file=sys.stderr)
                    return 2
                record["caught"][brk.name] = earlier["caught"][brk.name]
                record["first_failure"][brk.name] = earlier.get("first_failure", {}).get(brk.name)
        left = {name: tiers for name in names if name not in record["caught"]}
    todo = [brk for brk in mutations if left.get(brk.name)]

    def write() -> None:
        done = [name for name in names if name in record["caught"]]
        record["caught"] = {name: record["caught"][name] for name in done}
        record["first_failure"] = {name: record["first_failure"][name] for name in done}
        caught = record["caught"].values()
        record["plain"] = f"{sum(c == 'plain' for c in caught)}/{len(done)}"
        record["all_tiers"] = f"{sum(c is not None for c in caught)}/{len(done)}"
        record["tried"] = f"{len(done)} of {len(names)}"
        output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    with tempfile.TemporaryDirectory() as scratch:
        projects = queue.Queue()
        for copy in range(max(1, min(jobs, len(todo)))):
            projects.put(bake(Path(scratch) / str(copy), SCOPE_OF.get(kind, "research")))
        project = projects.get()
        for tier in (tiers if survivors else ["plain"]):
            unbroken = run_pytest(project, ["-q", "-x", "-p", "no:cacheprovider", *TIERS[tier]], timeout=3600)
            if unbroken.returncode != 0:
                print(f"error: the unbroken project fails its {tier} tier:\n{unbroken.stdout[-3000:]}",
                      file=sys.stderr)
                return 1
        projects.put(project)

        def run(brk: Break) -> tuple[str | None, str | None]:
            project = projects.get()
            try:
                for tier in left[brk.name]:
                    test = killed_by(project, brk, TIERS[tier])
                    if test is not None:
                        return tier, test
                return None, None
            finally:
                projects.put(project)

        with ThreadPoolExecutor(max_workers=projects.qsize()) as pool:
            for brk, (tier, test) in zip(todo, pool.map(run, todo), strict=True):
                record["caught"][brk.name], record["first_failure"][brk.name] = tier, test
                if survivors:  # the tiers it met, up to the one that caught it
                    met = left[brk.name][: left[brk.name].index(tier) + 1] if tier else left[brk.name]
                    record["survivors_tiers"][brk.name] = [*record["survivors_tiers"].get(brk.name, []), *met]
                print(f"{brk.name}: {tier or 'SURVIVED'} {test or ''}", flush=True)
                write()
    write()
    print(f"plain pytest: {record['plain']}; all tiers: {record['all_tiers']} ({record['tried']}) -> {output}")
    return 0


def try_each(todo: list[Break], places: list[Path], attempt: Callable[[Break, Path], Any]) -> list:
    """`attempt(brk, place)` for each break of `todo`, as many at once as there are places (copies of
    a bake or of the core), each place used by one break at a time; the results in `todo`'s order.
    A break's test trains in fresh processes, mostly on one thread: two copies keep two cores busy."""
    free: queue.SimpleQueue = queue.SimpleQueue()
    for place in places:
        free.put(place)

    def one(brk: Break):
        place = free.get()  # a place no other break is using
        try:
            return attempt(brk, place)
        finally:
            free.put(place)

    with ThreadPoolExecutor(max_workers=len(places)) as pool:
        return list(pool.map(one, todo))


# A break's test is mostly the start of a Python process: importing pytest, NumPy and torch (and
# torch._dynamo, which torch.use_deterministic_algorithms and an optimizer's step import) cost 2.6 to
# 3.0 s of CPU on 2026-12-06, and ending the process about a second more (the README's command); the
# test itself often takes less. So the tests of each folder run in
# children forked from one process, its fork server, that started as `python -m pytest` would there
# (in the same folder, with the same environment, so the same sys.path) and imported those once. It
# imports nothing of the folder's own code: each child imports that afresh, broken or not, and the
# processes a test starts are as fresh as ever. A child runs in a process group of its own, so that
# a timeout kills what it started too; the server ends it when its parent (this process) is gone.
FORK_SERVER = r"""
import atexit, json, os, signal, sys, time
import numpy, pytest, torch, torch._dynamo  # paid here once for every child
parent = os.getppid()
for line in sys.stdin:
    job = json.loads(line)
    child = os.fork()
    if child == 0:  # as `python -m pytest ARGS` would be on entering pytest
        os.setpgid(0, 0)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdin = open(os.devnull)
        numpy.random.seed()  # as a fresh process's, drawn anew (Python reseeds `random` at a fork itself)
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *job["args"]]
        code = pytest.main(job["args"])
        atexit._run_exitfuncs()  # what the end of a process runs (loader workers stopped, say), then no teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    deadline = time.monotonic() + job["timeout"]
    while (status := os.waitpid(child, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline or os.getppid() != parent:
            os.killpg(child, signal.SIGKILL)
        time.sleep(0.02)
    print(json.dumps(os.waitstatus_to_exitcode(status[1])), flush=True)
os._exit(0)  # no more jobs: the end, without tearing torch down
"""
_servers: dict[tuple, tuple[subprocess.Popen, threading.Lock]] = {}
_servers_lock = threading.Lock()


def run_pytest(folder: Path, args: list[str], env: Mapping[str, str] | None = None,
               timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in `folder`, with `env` (by default this process's environment), run
    as a child of the fork server (FORK_SERVER) of that folder and environment, started at the
    first call: its exit status (-9 after `timeout` seconds), stdout and stderr. This pytest's own
    variables (PYTEST_CURRENT_TEST names each test) are left out, as a shell's pytest has none."""
    env = {name: value for name, value in (os.environ if env is None else env).items()
           if not name.startswith("PYTEST_")}
    key = (str(folder), tuple(sorted(env.items())))
    with _servers_lock:
        if key not in _servers or _servers[key][0].poll() is not None:
            server = subprocess.Popen([sys.executable, "-c", FORK_SERVER], cwd=folder, env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            _servers[key] = server, threading.Lock()
        server, lock = _servers[key]
    with lock, tempfile.TemporaryDirectory() as scratch:  # one child of a server at a time
        out, err = Path(scratch) / "out", Path(scratch) / "err"
        server.stdin.write(json.dumps({"args": args, "out": str(out), "err": str(err), "timeout": timeout}) + "\n")
        server.stdin.flush()
        reply = server.stdout.readline()
        if not reply:
            raise RuntimeError(f"the fork server of {folder} ended (exit status {server.wait()})")
        return subprocess.CompletedProcess(["python", "-m", "pytest", *args], json.loads(reply),
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))


def stop_fork_servers() -> None:
    """Ends every fork server that run_pytest started (each holds torch in memory)."""
    with _servers_lock:
        for server, _ in _servers.values():
            server.stdin.close()
            server.wait()
        _servers.clear()


def core_catches(jobs: int, kind: str = "mutations") -> int:
    """Each break of breaks/mutations.toml in a file the core holds, applied to a copy of core/ (imported
    first): the first test of core/tests/ that fails (`-x`), or "survives". A caught break may name that
    test as its core_caught_by: tests/test_core_mutations.py then runs it against the core, and
    tests/test_mutations.py no longer against a bake. Another `kind` (independent-core: a round of
    breaks of core/ alone) is recorded, as kill-ratio records a round, in breaks/SETS[kind]."""
    core = ROOT / "core"
    todo = [brk for brk in load(kind) if (core / "src" / "repro_core" / brk.file).is_file()]
    if kind != "mutations" and len(todo) != len(load(kind)):
        print(f"error: breaks/{kind}.toml names files that core/src/repro_core/ does not hold", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        copies = []
        for number in range(jobs):
            copy = Path(scratch) / str(number) / "repro_core"  # apply() finds src/<folder name>/ in it
            shutil.copytree(core, copy, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            copies.append(copy)

        def attempt(brk: Break, copy: Path) -> str | None:
            path, original = apply(copy, brk)
            try:
                result = run_pytest(copy, ["-q", "-x", "-p", "no:cacheprovider", "-rfE", "tests"],
                                    {**os.environ, "PYTHONPATH": str(copy / "src")}, timeout=3600)
            finally:
                path.write_text(original, encoding="utf-8")
            return first_failure(result.stdout) if result.returncode == 1 else None

        caught, first = 0, {}
        for brk, test in zip(todo, try_each(todo, copies, attempt), strict=True):
            caught += test is not None
            first[brk.name] = test
            recorded = brk.core_caught_by or None  # another test may fail first: both catch it
            same = (test or "").split("[")[0] == recorded or kind != "mutations"
            recorded = "" if same else f" (recorded: {recorded})"
            print(f"{brk.name}: {test or 'survives'}{recorded}", flush=True)
    print(f"{caught} of {len(todo)} breaks of the core's files caught by core/tests/")
    if kind != "mutations":
        record = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "command": f"python scripts/breaks.py core-catches --set {kind}", "tiers": ["core/tests"],
                  "caught": {name: "core/tests" if test else None for name, test in first.items()},
                  "first_failure": first, "core/tests": f"{caught}/{len(todo)}", "tried": f"{len(todo)} of {len(todo)}"}
        (BREAKS / SETS[kind]).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["patches", "kill-ratio", "core-catches"])
    parser.add_argument("--check", action="store_true", help="patches: only compare; change nothing")
    parser.add_argument("--set", default="mutations", choices=list(SETS), help="kill-ratio: which breaks: "
                        "the mutation suite, or an independent round written from the docs alone (of the "
                        "research size, independent-2 to -7 its second to seventh rounds; independent-teaching "
                        "and its second to twelfth rounds, -2 to -12: of the teaching size, whose suite is one "
                        "tier; core-catches: independent-core and its second to twelfth rounds, -2 to -12: the "
                        "core's, against core/tests/)")
    parser.add_argument("--out", type=Path, help="kill-ratio: the record (default: breaks/kill-ratio.json, or "
                        "breaks/kill-ratio-independent.json for --set independent)")
    parser.add_argument("--tiers", default=",".join(TIERS), help="kill-ratio: the tiers to try, in order "
                        "(comma-separated; default: all three)")
    parser.add_argument("--resume", action="store_true", help="kill-ratio: only the breaks --out has no "
                        "result for (a round stopped part-way goes on)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="kill-ratio, core-catches: breaks tried at a time, each in a copy of its own")
    parser.add_argument("--survivors", action="store_true", help="kill-ratio: the breaks --out records as "
                        "caught by none of its tiers, against --tiers (others than its own)")
    parser.add_argument("--only", default="", help="kill-ratio: these breaks (comma-separated) run again, the "
                        "others' results kept from --out")
    args = parser.parse_args()
    if args.command == "patches":
        return patches(args.check)
    if args.command == "core-catches":
        return core_catches(args.jobs, args.set)
    if args.set in CORE_SETS:  # breaks of core/ itself, tried against core/tests/
        parser.error(f"--set {args.set} is core-catches' round: python scripts/breaks.py core-catches "
                     f"--set {args.set}")
    output = args.out or BREAKS / SETS[args.set]
    tiers = [tier for tier in args.tiers.split(",") if tier]
    if not tiers or set(tiers) - set(TIERS):
        parser.error(f"--tiers takes some of {', '.join(TIERS)}, not {args.tiers!r}")
    return kill_ratio(args.set, output, [name for name in args.only.split(",") if name], args.jobs, args.resume,
                      tiers, args.survivors)


if __name__ == "__main__":
    sys.exit(main())
