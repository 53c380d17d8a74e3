"""A real mutation tool (mutmut) over the modules that need no training to test, each where its tests are.

    python scripts/mutate.py           # runs mutmut on the core's modules against the core's own tests (a
                                       # copy of core/), on the project's against a research bake's
                                       # suite; writes breaks/mutmut.json
    python scripts/mutate.py --keep D  # the same, in folder D, kept afterwards (`mutmut show NAME` there)
    python scripts/mutate.py --only engine/optim.py,engine/statistics.py   # those modules; the others' results kept
    python scripts/mutate.py --only utils/repro.py --results-of D   # records what a run in D left (no new run)

A run is long (minutes to an hour a module on two cores). One stopped part-way goes on in its kept
folder with `mutmut run [NAMES]` there (mutmut skips the mutants it has a result for), and
`--results-of D` then records the modules of `--only`, each of which must be complete.

The hand-written mutation suite (breaks/mutations.toml) holds the breaks its authors thought of;
mutmut makes every small change it knows to each line (an operator, a constant, a comparison, an
argument left out) and runs the tests that reach the changed function against each. A mutant the
tests do not notice is a test missing, or a change that alters nothing (an equivalent mutant):
breaks/mutants.toml gives each survivor its verdict, and why.

Where: a module of the core (core/src/repro_core/, vendored verbatim into the bakes) is mutated in
a copy of core/ and tried against core/tests, the tests beside it, which need no bake (its
mutants are named repro_core.MODULE...); config.py and engine/environment.py, which only the
project has, in a research bake against its suite (my_project.MODULE...). The record says which,
per module ("against": "core" or "bake").

It is a maintainer's task, not part of CI (its time is in the record). The tests it tries against
a mutant are the plain tier's that call the mutated function within four calls of the package's
own code (mutmut's max_stack_depth): its unit tests, not every training run that passes through
it. A test that reads the session fixture's runs, or starts a process itself, is left out:
each mutant runs in a fresh process, which would train them again. (A run the package
itself starts as a child, as study does, runs the mutant too; while mutmut records which tests
reach which function, such a child runs the code unmutated.) Whether the whole suite catches a
break is kill-ratio's question (scripts/breaks.py). tests/test_exercises.py checks that the
committed record covers modules of the list below, each still a module of the project, and that
each survivor it names has a verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "breaks" / "mutmut.json"
CORE = ROOT / "core"
CORE_PACKAGE = CORE / "src" / "repro_core"
MUTMUT = "mutmut==3.8.1"

# The pure modules (issue 31): keys and seeds, the loader's sampler, the optimizer's groups and
# schedules, the statistics, the run folder's readers and writers, the environment's differences,
# the task's contract checks, the config's parsing.
MODULES = (
    "utils/repro.py",
    "utils/hashseed.py",
    "utils/data.py",
    "engine/optim.py",
    "engine/statistics.py",
    "engine/run_folder.py",
    "engine/environment.py",
    "engine/contract.py",
    "config.py",
)

# Put first in the scratch bake's tests/conftest.py (after its __future__ import), before it
# imports the package: while mutmut records which tests reach which function, it resolves the file
# of each frame on the stack, and a function called at import time (repro.py sets a constant from
# one) has importlib's frozen frames below it, which are no file. Such a call is no test's: it is
# left out of the record.
TOLERATE_IMPORT_TIME_CALLS = '''# ---- added by scripts/mutate.py, in its scratch bake only ----
try:
    import mutmut.mutation.trampoline as _trampoline
except ImportError:  # the scratch bake's suite run without mutmut
    pass
else:
    _record_hit = _trampoline.record_trampoline_hit

    def _record_hit_of_a_test(name, caller=None):
        try:
            _record_hit(name, caller=caller)
        except FileNotFoundError:
            pass

    _trampoline.record_trampoline_hit = _record_hit_of_a_test
# ---- the bake's own conftest.py ----

'''

# Appended to the scratch bake's tests/conftest.py: leaves out the tests that read the runs of the
# session fixture (each mutant runs in a fresh process, which would train them again) and
# those that start a training child.
SELECT = '''

# ---- added by scripts/mutate.py, in its scratch bake only ----
import inspect as _inspect
import os as _os
import re as _re
import subprocess as _subprocess

_popen_init = _subprocess.Popen.__init__


def _popen_init_outside_the_stats_run(self, *args, env=None, **kwargs):
    # While mutmut records which tests reach which function, a child (the package's own commands
    # start training children) runs the code unmutated and records nothing: mutmut's record of a
    # call walks the stack to the test, which a child's stack never reaches. While it tries a
    # mutant, a child runs that mutant too.
    if _os.environ.get("MUTANT_UNDER_TEST") == "stats":
        env = {**(_os.environ if env is None else env), "MUTANT_UNDER_TEST": ""}
    _popen_init(self, *args, env=env, **kwargs)


_subprocess.Popen.__init__ = _popen_init_outside_the_stats_run

# subprocess.run(...) starts a process; module.subprocess, the module as another module holds it, is
# a stand-in's target (monkeypatch.setattr(environment.subprocess, "run", ...)), which starts none.
_CHILD = _re.compile(r"(?<![.\\w])subprocess\\.|\\bPopen\\b|\\btorchrun\\b")


def _codes(code):
    yield code
    for constant in code.co_consts:  # the lambdas and functions defined inside
        if _inspect.iscode(constant):
            yield from _codes(constant)


def _starts_a_child(function, seen) -> bool:
    """Whether `function`, or a function of the test files that it calls (by name, transitively),
    starts a process."""
    if not _inspect.isfunction(function) or function in seen or "/tests/" not in function.__code__.co_filename:
        return False
    seen.add(function)
    if _CHILD.search(_inspect.getsource(function)):
        return True
    names = {name for code in _codes(function.__code__) for name in code.co_names}
    return any(_starts_a_child(function.__globals__.get(name), seen) for name in names)


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        functions = [getattr(item, "function", None)]
        for definitions in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
            functions += [definition.func for definition in definitions]
        starts_a_child = any(_starts_a_child(function, set()) for function in functions)
        needs_runs = {"runs", "all_runs"} & set(getattr(item, "fixturenames", ()))
        (drop if needs_runs or starts_a_child else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
'''


def against(module: str) -> str:
    """Where a module is mutated: "core" for a module of the core, tried against core/tests; "bake"
    for one only the project has, tried against a research bake's suite."""
    return "core" if (CORE_PACKAGE / module).is_file() else "bake"


def copy_core(folder: Path) -> Path:
    """A scratch copy of core/ (its package, its tests and its pyproject.toml), as mutmut's project."""
    import shutil

    project = folder / "core"
    shutil.copytree(CORE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    (project / "tests" / "conftest.py").touch()  # where configure() adds its selection
    return project


def package_of(project: Path) -> str:
    """The import name of the package under a project's src/ (my_project, repro_core)."""
    [package] = [path.name for path in (project / "src").iterdir() if (path / "__init__.py").is_file()]
    return package


def bake(folder: Path) -> Path:
    from cookiecutter.main import cookiecutter

    return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(folder),
                             extra_context={"project_name": "my_project", "init_git": False, "scope": "research"}))


# Tests of the core that read its source rather than run it: mutmut's copy of a mutated module
# imports its trampoline and holds every mutant as a function of its own, so these fail on any copy
# mutmut makes, mutated or not. They are left out of the core's run (and run in CI as they are).
READS_THE_SOURCE = (
    "tests/test_core_layering.py",
    "tests/test_core_platform.py::test_the_core_restarts_the_interpreter_in_one_place_for_both_sizes",
)


def configure(project: Path, modules: list[str]) -> None:
    """mutmut's settings in the bake's pyproject.toml, and the test selection in its conftest."""
    package = package_of(project)
    left_out = [arg for test in READS_THE_SOURCE for arg in ("--deselect", test)] if package == "repro_core" else []
    only = ", ".join(json.dumps(f"src/{package}/{module}") for module in modules)
    # mutmut runs the tests in a copy (mutants/) that holds src/ and tests/: the rest too, since
    # some tests read the README and the docs.
    others = ", ".join(json.dumps(path.name) for path in sorted(project.iterdir())
                       if path.name not in ("src", "tests", "pyproject.toml"))
    with (project / "pyproject.toml").open("a", encoding="utf-8") as file:
        file.write(f'''
[tool.mutmut]
source_paths = ["src"]
only_mutate = [{only}]
also_copy = [{others}]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"{"".join(f", {json.dumps(arg)}" for arg in left_out)}]
pytest_add_cli_args_test_selection = ["tests"]
# A mutant is tried against the tests that call its function within four calls of the package's
# own code: its unit tests, not every test whose run passes through it (a step reaches most).
max_stack_depth = 4
# torch is not fork-safe once it has run: each mutant's process is forked from a clean server.
process_isolation = "forkserver"
''')
    conftest = project / "tests" / "conftest.py"
    head, future, rest = conftest.read_text(encoding="utf-8").partition("from __future__ import annotations\n")
    if not future:  # no __future__ import (or no conftest.py yet), which must come first: the patch goes at the top
        head, rest = "", head
    conftest.write_text(head + future + TOLERATE_IMPORT_TIME_CALLS + rest + SELECT, encoding="utf-8")


def results(project: Path) -> dict[str, str]:
    """mutant name -> status, as `mutmut results --all true` prints them."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=project,
                         capture_output=True, text=True, check=True).stdout
    statuses = {}
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            statuses[name] = status
    return statuses


def module_of(mutant: str, package: str) -> str:
    """'my_project.engine.optim.x_make_optimizer__mutmut_5' -> 'engine/optim.py'."""
    dotted = mutant.split(".x_")[0].split(".xǁ")[0]
    return dotted.removeprefix(package + ".").replace(".", "/") + ".py"


def run_mutmut(project: Path, modules: list[str], jobs: int) -> tuple[dict[str, str], float]:
    """Configures and runs mutmut in `project` over `modules`: (mutant -> status, minutes)."""
    configure(project, modules)
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)],
                         cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"mutmut run failed in {project}:\n{run.stdout[-3000:]}")
    return results(project), round((time.monotonic() - started) / 60, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="bake into this folder and keep it")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", default="", help="these modules (comma-separated), the others' results kept")
    parser.add_argument("--results-of", type=Path, metavar="D",
                        help="record the results of the run in D (a --keep folder) instead of running")
    args = parser.parse_args()
    chosen = [module for module in args.only.split(",") if module] or list(MODULES)
    unknown = sorted(set(chosen) - set(MODULES))
    if unknown:
        print(f"error: not a module this script mutates: {', '.join(unknown)} (see MODULES)", file=sys.stderr)
        return 2
    earlier = json.loads(RECORD.read_text(encoding="utf-8")) if args.only and RECORD.exists() else {}
    try:
        import mutmut
    except ModuleNotFoundError:
        print(f"error: mutmut is not installed: pip install {MUTMUT}", file=sys.stderr)
        return 2
    found = {}  # "core" / "bake" -> (the project mutmut ran in, mutant -> status, minutes)
    if args.results_of is not None:
        for project in [path for path in args.results_of.iterdir() if (path / "mutants").is_dir()]:
            statuses = results(project)  # its time is not known: it may have run in parts
            found["core" if package_of(project) == "repro_core" else "bake"] = (project, statuses, None)
            unfinished = sorted({module_of(name, package_of(project)) for name, status in statuses.items()
                                 if status == "not checked"} & set(chosen))
            if unfinished:
                print(f"error: mutmut has not finished {', '.join(unfinished)} in {project}: run `mutmut run` there",
                      file=sys.stderr)
                return 1
    else:
        with tempfile.TemporaryDirectory() as scratch:
            folder = args.keep or Path(scratch)
            folder.mkdir(parents=True, exist_ok=True)
            for where, make in (("core", copy_core), ("bake", bake)):
                mine = [module for module in chosen if against(module) == where]
                if mine:
                    project = make(folder)
                    try:
                        found[where] = (project, *run_mutmut(project, mine, args.jobs))
                    except RuntimeError as error:
                        print(f"error: {error}", file=sys.stderr)
                        return 1
    modules = {module: result for module, result in earlier.get("modules", {}).items() if module not in chosen}
    survivors = {name: module for name, module in earlier.get("survivors", {}).items() if module not in chosen}
    for module in chosen:
        if against(module) not in found:
            print(f"error: no mutmut run of {module} found", file=sys.stderr)
            return 1
        project, statuses, minutes = found[against(module)]
        mine = {name: status for name, status in statuses.items() if module_of(name, package_of(project)) == module}
        counts = [*mine.values()]
        modules[module] = {"date": time.strftime("%Y-%m-%d"), "minutes": minutes, "against": against(module),
                           "mutants": len(mine), **{status: counts.count(status) for status in sorted(set(counts))}}
        survivors.update({name: module for name, status in mine.items() if status != "killed"})
    record = {
        "tool": f"mutmut {mutmut.__version__}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "command": "python scripts/mutate.py",
        "modules": {module: modules[module] for module in MODULES if module in modules},
        "killed": f"{sum(m.get('killed', 0) for m in modules.values())}/{sum(m['mutants'] for m in modules.values())}",
        "survivors": dict(sorted(survivors.items())),
    }
    RECORD.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"killed {record['killed']} -> {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
