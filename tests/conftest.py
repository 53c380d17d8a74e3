"""Shared facts about the template, for its tests."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_DIR = ROOT / "{{cookiecutter.project_slug}}"
# What a clone of the template holds that cookiecutter, cruft and copier read.
TEMPLATE_PARTS = ["cookiecutter.json", "copier.yml", "local_extensions.py", "hooks", "{{cookiecutter.project_slug}}"]
# copier's answers file, as a template: its name renders empty under cookiecutter, which then skips it.
COPIER_ANSWERS_TEMPLATE = "{{cookiecutter.__answers}}"
COOKIECUTTER_JSON = json.loads((ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
# The name that every quoting bug trips over: both quote kinds, a backslash, and Chinese.
AWKWARD_NAME = 'O\'Brien "Quoted" 项目 back\\slash'
IDENTITY = {"GIT_AUTHOR_NAME": "Ada Test", "GIT_AUTHOR_EMAIL": "ada@example.org",
            "GIT_COMMITTER_NAME": "Ada Test", "GIT_COMMITTER_EMAIL": "ada@example.org"}


sys.path.insert(0, str(ROOT))  # local_extensions.py, at the template's top
from local_extensions import load_module as load  # noqa: E402

pre_gen = load("pre_gen_project", ROOT / "hooks" / "pre_gen_project.py")
post_gen = load("post_gen_project", ROOT / "hooks" / "post_gen_project.py")
# scripts/breaks.py, loaded once: the mutation suites, the exercises and test_fork_server.py share
# its fork servers (run_pytest), which the fixture below stops.
breaks = load("breaks", ROOT / "scripts" / "breaks.py")


@pytest.fixture(scope="module", autouse=True)
def fork_servers_stopped_at_the_end() -> Iterator[None]:
    """Each fork server (breaks.run_pytest) holds torch in memory: none outlives the module that
    started it."""
    yield
    breaks.stop_fork_servers()


def clean_git_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment with git made blind to the machine's settings.

    HOME (and XDG_CONFIG_HOME) point at an empty folder and the system config is off, so that git
    knows an identity only when a test gives one; GIT_* variables of the caller are dropped.
    """
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1", **extra)
    return env


def copy_template(destination: Path) -> Path:
    """A scratch copy of the template as it is in the working tree (uncommitted edits included)."""
    destination.mkdir(parents=True)
    for part in TEMPLATE_PARTS:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, destination / part,
                            ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".ruff_cache"))
        else:
            shutil.copy2(source, destination / part)
    return destination


def cookiecutter_cli(out: Path, *args: str, env: dict[str, str] | None = None,
                     template: Path = ROOT) -> subprocess.CompletedProcess:
    """Runs cookiecutter's command line as a user would, without prompts, into the folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(out), str(template), *args],
                          capture_output=True, text=True, env=env)


def copier_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs copier's command line as a user would."""
    return subprocess.run([sys.executable, "-m", "copier", *args], cwd=cwd, capture_output=True, text=True, env=env)

# The generated README, one template file per size and language: a name that renders empty is not
# written, so each project gets exactly one README.md, of its size and in its language (under
# cookiecutter and copier alike). GENERATED_README: the research size's; TEACHING_README: the other.
def readme_template(scope: str, language: str) -> Path:
    return TEMPLATE_DIR / (f"{{% if cookiecutter.language == '{language}' and cookiecutter.scope == '{scope}' %}}"
                           "README.md{% endif %}")


GENERATED_README = {language: readme_template("research", language) for language in ("en", "zh")}
TEACHING_README = {language: readme_template("teaching", language) for language in ("en", "zh")}


def docs_page(name: str, language: str = "en") -> Path:
    """A page of the research size's docs/ (docs/NAME.md in a project), one template file per language."""
    return TEMPLATE_DIR / "docs" / f"{{% if cookiecutter.language == '{language}' %}}{name}.md{{% endif %}}"


# Whole generated suites (minutes each) in the background. test_bake.py's combinations and tiers
# and test_tasks.py's tasks each need a project's whole `pytest`; one such suite keeps one to two of
# CI's two cores busy (its tests wait on the processes they start), so run one after the other
# they leave the machine part idle. Every suite a session selects starts at the session's start,
# two at a time, the longest first; the tests that wait on them run last (pytest_collection_
# modifyitems below), so that all the rest runs meanwhile. CI's load average is then 5 to 15 on two
# cores at times: the generated kill and signal tests hold their runs at a chosen step and wait
# on states, not durations, so that they pass under it.
@dataclass(frozen=True)
class Suite:
    """A generated project's suite: `make(folder)` bakes the project into the empty `folder` (and
    edits it, as a user would) and returns it; `selection` is what follows `pytest -q`; `minutes`
    about how long it takes on CI, to start the longest first (not a limit: a suite shares the
    machine with the rest of the session, so each gets SUITE_TIMEOUT, which only ends a hang)."""

    make: Callable[[Path], Path]
    selection: tuple[str, ...] = ()
    minutes: float = 4.0


SUITE_TIMEOUT = 2400

# Tests of a bake that the default bakes' suites run (the defaults, the teaching defaults) and the
# template's other suites leave out (--deselect): what they exercise is the same code in every bake,
# whatever task.py holds and whatever the options those suites vary (the dataset, the names, the
# language, the licence, the determinism default): the run folder's one-writer lock and the
# processes that die with it, Ctrl-C in the commands and in loader workers, the hash-seed restart,
# the package's layout, the one line for a task.py that imports a name that moved, the stop
# signals (a study's Ctrl-C among them), study's reading of --config, a command whose reader
# stops early, a portable run's record read by verify (the task's own operations under the
# portable pins are fingerprinted in every bake by test_fingerprint.py's other tests), the signal
# tests' hold harness, and SyncBatchNorm's refusal (in a model the test writes itself).
# core/tests tests their core mechanisms directly too (the lock held, released and killed; the
# restart; Ctrl-C in loader workers). A generated project's own `pytest` runs them all; this saves
# the template's CI minutes of one core's time per suite that leaves them out.
SAME_IN_EVERY_BAKE = (
    "tests/test_one_writer.py",
    "tests/test_ctrl_c.py",
    "tests/test_layout.py",
    "tests/test_repro.py::test_restart_with_hash_seed_gives_the_order_a_shell_with_that_hash_seed_gives",
    "tests/test_repro.py::test_negative_control_setting_pythonhashseed_inside_the_script_changes_nothing",
    "tests/test_data.py::test_loader_workers_leave_ctrl_c_to_the_training_process_however_they_were_started",
    "tests/test_task_contract.py::test_a_task_py_that_imports_what_is_not_there_gets_one_line_naming_where_it_is_now",
    "tests/test_fingerprint.py::test_a_portable_run_records_its_fingerprint_and_verify_where_the_machine_differs_"
    "names_the_operation",
    "tests/test_stop_signals.py",
    "tests/test_study.py::test_one_ctrl_c_in_a_terminal_stops_the_study_and_its_running_seed_with_a_checkpoint",
    "tests/test_study.py::test_a_study_with_a_config_file_records_the_files_settings_and_gives_each_seed_its_own",
    "tests/test_commands.py::test_a_reader_that_stops_early_ends_a_command_quietly_without_a_traceback",
    "tests/test_resume.py::test_a_held_run_signalled_the_moment_its_marker_appears_still_stops_there",
    "tests/test_world_sizes.py::test_a_model_with_sync_batchnorm_is_refused_in_one_line_before_anything_is_written",
)
NOT_SAME_IN_EVERY_BAKE = tuple(arg for test in SAME_IN_EVERY_BAKE for arg in ("--deselect", test))
# Likewise for the torchrun tier (`-m distributed`): tests that the GPT task's tier runs (the
# defaults' options, test_tasks.py) and the digits combination's tier leaves out (test_bake.py's
# DISTRIBUTED_COMBINATIONS), since neither task.py nor those options reach what they exercise:
# torchrun's launcher, its agents and their signals (a SIGTERM to one rank, a killed launcher),
# two nodes meeting by rendezvous, a SLURM array, and FSDP on a tied model the test writes itself.
# The digits tier took 163 s by pytest's count without them, 311 s of CPU, where it took 252 s,
# 425 s of CPU, with them (2026-12-07, `/usr/bin/time pytest -q -n 0 -m distributed`, a digits bake).
SAME_IN_EVERY_TIER = (
    "tests/test_cluster.py",
    "tests/test_distributed.py::test_two_nodes_of_one_process_give_the_weights_of_one_node_of_two",
    "tests/test_distributed.py::test_a_two_node_run_stopped_by_sigterm_and_launched_again_with_resume_ends_with_"
    "the_same_weights",
    "tests/test_distributed.py::test_sigterm_to_one_rank_alone_stops_every_rank_after_the_same_step_with_its_"
    "checkpoint",
    "tests/test_distributed.py::test_a_killed_torchrun_launcher_leaves_no_worker_training",
    "tests/test_fsdp.py::test_a_model_with_tied_embeddings_trains_under_fsdp_twice_to_the_same_bits",
    "tests/test_fsdp.py::test_a_tied_model_killed_under_fsdp_and_resumed_is_the_run_that_never_stopped",
    "tests/test_fsdp.py::test_a_tied_model_under_fsdp_resumes_at_another_world_size_and_records_it",
)
NOT_SAME_IN_EVERY_TIER = tuple(arg for test in SAME_IN_EVERY_TIER for arg in ("--deselect", test))
# The selection of every suite but the default bakes': those less SAME_IN_EVERY_BAKE, in one process.
# A research bake's plain `pytest` spreads its files over the cores (pytest-xdist's `-n auto`, in its
# pyproject.toml), which costs a suite 20 to 40 s of CPU more (322 and 340 s against 300 s, a default
# bake on 2026-12-07) for its workers' start and the runs two workers each train; this session's
# suites keep both cores busy already. The default bakes' suites run as a user's plain `pytest` does.
OTHER_BAKES = ("-n", "0", *NOT_SAME_IN_EVERY_BAKE)


def outcomes(report: Path) -> tuple[set[str], set[str]]:
    """The tests of a suite's JUnit report (as `tests/test_x.py::test_y[param]`) that passed, and
    those that failed, erred or skipped."""
    passed, other = set(), set()
    for case in ElementTree.parse(report).iter("testcase"):
        node = case.get("classname").replace(".", "/") + ".py::" + case.get("name")
        failed = {child.tag for child in case} & {"failure", "error", "skipped"}
        (other if failed else passed).add(node)
    return passed, other


def ran_and_passed(report: Path, tests: tuple[str, ...]) -> list[str]:
    """Those of `tests` (node ids or their beginnings) that no test of the report matched, or that
    a test matched which did not pass: a renamed test, left out everywhere, shows here."""
    passed, other = outcomes(report)
    return [test for test in tests if not any(node.startswith(test) for node in passed)
            or any(node.startswith(test) for node in other)]


def bake(folder: Path, context: dict) -> Path:
    """The template baked without prompts into `folder` with `context`; the project's path."""
    from cookiecutter.main import cookiecutter

    return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(folder), extra_context=context))


def pytest_collection_modifyitems(items):
    """The tests that wait on a background suite (marked `suite`) go last, in their own order."""
    items.sort(key=lambda item: item.get_closest_marker("suite") is not None)


@pytest.fixture(scope="session", autouse=True)
def background_suites(request, tmp_path_factory) -> dict[str, Future]:
    """Suite name -> the future of its run (a CompletedProcess that passed, or the failure), for
    every test the session selected that is marked `suite(NAME)`: NAME is a key of its module's
    SUITES. Baked here, one after another (cookiecutter changes the working directory, which
    threads share), each started as soon as it is baked."""
    wanted: dict[str, Suite] = {}
    for item in request.session.items:
        marker = item.get_closest_marker("suite")
        if marker is not None:
            wanted[marker.args[0]] = item.module.SUITES[marker.args[0]]
    started: list[subprocess.Popen] = []
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {}
    for name, suite in sorted(wanted.items(), key=lambda pair: -pair[1].minutes):
        folder = tmp_path_factory.mktemp("suite")
        try:
            project = suite.make(folder)
        except Exception as error:  # the waiting test reports it, with the others still run
            futures[name] = Future()
            futures[name].set_exception(error)
            continue
        futures[name] = pool.submit(run_generated_suite, project, *suite.selection,
                                    timeout=SUITE_TIMEOUT, started=started, report=folder / "report.xml", label=name)
    yield futures
    pool.shutdown(wait=False, cancel_futures=True)
    for process in started:  # a session stopped early (-x, Ctrl-C) leaves no suite running
        stop_group(process)


# What each generated suite cost, as run_generated_suite measured it: (its name in SUITES, or the
# project's folder and the selection; wall seconds; CPU seconds of its pytest and of every process
# that one waited for). The session's summary lists them, the costliest first: the figures a change
# to CI's time starts from.
SUITE_COSTS: list[tuple[str, float, float]] = []


def run_generated_suite(project: Path, *selection: str, timeout: int = SUITE_TIMEOUT, started: list | None = None,
                        report: Path | None = None, label: str | None = None) -> subprocess.CompletedProcess:
    """`pytest -q [selection]` in a baked project, with Ctrl-C ignored, from an environment without
    this session's PYTEST_ variables; fails with the end of its output unless it passed. Its own process group, so
    that a teardown can stop it and all it started (`started` gets the process). With `report`,
    pytest writes its JUnit XML there (each test's outcome), and the result's `.report` names it.
    The result's `.wall` and `.cpu` are its seconds, noted in SUITE_COSTS under `label`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    junit = () if report is None else (f"--junitxml={report}",)
    # Started with Ctrl-C ignored, as a CI script's background job or nohup starts it, which every
    # process it starts inherits: the generated suite's Ctrl-C tests must pass so too (its conftest
    # gives the commands it starts Ctrl-C back). sh's trap, not preexec_fn, which threads make unsafe.
    # sh waits for pytest, then its `times` prints the CPU of the processes it waited for: pytest's
    # and, as each waits for its own, that of every process the suite started.
    ignoring_ctrl_c = ["/bin/sh", "-c", 'trap "" INT; "$0" "$@"; status=$?; times >&2; exit $status']
    began = time.monotonic()
    process = subprocess.Popen([*ignoring_ctrl_c, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                *selection, *junit], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, start_new_session=True)
    if started is not None:
        started.append(process)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(process)
        stdout, stderr = process.communicate()
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    result.project, result.report = project, report
    result.wall, result.cpu = time.monotonic() - began, children_cpu(stderr)
    SUITE_COSTS.append((label or " ".join((project.name, *selection))[:100], result.wall, result.cpu))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
    return result


def children_cpu(stderr: str) -> float:
    """The user and system seconds of the second line of sh's `times` (its children's), the last
    thing `stderr` holds: "0m3.236000s 0m0.296000s" (dash), "0m3.236s 0m0.296s" (bash). NaN when
    it holds none (a killed shell)."""
    found = re.findall(r"(\d+)m([\d.]+)s (\d+)m([\d.]+)s", stderr[-200:])
    if not found:
        return float("nan")
    minutes, seconds, sys_minutes, sys_seconds = found[-1]
    return 60 * int(minutes) + float(seconds) + 60 * int(sys_minutes) + float(sys_seconds)


def pytest_terminal_summary(terminalreporter):
    if SUITE_COSTS:
        terminalreporter.section("generated suites: wall and CPU seconds, the costliest first")
        # A suite its timeout killed printed no `times`: its CPU is NaN, listed last, out of the sum.
        for name, wall, cpu in sorted(SUITE_COSTS, key=lambda cost: (math.isnan(cost[2]), -cost[2])):
            terminalreporter.write_line(f"{wall:7.0f} s {cpu:7.0f} s CPU  {name}")
        unmeasured = sum(math.isnan(cost[2]) for cost in SUITE_COSTS)
        measured = sum(cost[2] for cost in SUITE_COSTS if not math.isnan(cost[2]))
        terminalreporter.write_line(f"{'':9} {measured:7.0f} s CPU in all"
                                    + (f", less {unmeasured} suite(s) killed unmeasured" if unmeasured else ""))


def stop_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
