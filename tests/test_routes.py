"""Every way the generated README tells a user to change the settings keeps the suite green when
done as it says ("Changing the settings"), and fails, naming the place, when a step is left out.

One research project gets all the changes at once, each made the way a user makes it:
- change what a setting affects: task.py stops reading --dropout, and config.py says so
  (effect "execution");
- add a setting: --init-scale, a field of Config that task.py reads, with its row in the README's
  flags table;
- change a default: --width 16 -> 24, in config.py and in the table.
Then its whole plain suite runs: that project is test_bake.py's digits combination, whose suite runs
there with the routes taken (ROUTED). The negative controls leave out one step each, in a fresh
project of the defaults, and run only the test that must catch it.

The teaching size has no `effect`: its README's "Bring your own task" says to take a flag the task
does not read out of config.py. Its digits combination (TEACHING_ROUTED) gets a task.py without
dropout and with a fixed split, and loses --dropout and --data-seed; its negative control keeps them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import ROOT, load
from test_bake import ROUTED, TEACHING_ROUTED
from test_bake import SUITES as BAKE_SUITES

tasks = load("tasks_benchmark", ROOT / "benchmarks" / "tasks.py")
pytestmark = pytest.mark.slow

# What task.py gains for the new setting: the task's own model, its initial weights scaled.
READS_INIT_SCALE = '''

_make_model = make_model


def make_model(config, train_set):
    model = _make_model(config, train_set)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(config.init_scale)
    return model
'''
NEW_FIELD = ('    init_scale: float = setting(1.0, "scales every initial weight of the model", number(0))\n')
NEW_ROW = "| `--init-scale` | 1.0 | scales every initial weight of the model |\n"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name} no longer holds {old!r} once: update this test's routes"
    path.write_text(text.replace(old, new), encoding="utf-8")


def ignore_dropout(project: Path, say_so_in_config: bool = True) -> None:
    package = project / "src" / project.name
    edit(package / "task.py", "dropout=config.dropout", "dropout=0.25")
    if say_so_in_config:
        edit(package / "config.py", 'setting(0.25, "dropout probability", number(0, 1, low_inclusive=True))',
             'setting(0.25, "dropout probability", number(0, 1, low_inclusive=True), effect="execution")')


def add_init_scale(project: Path, with_readme_row: bool = True) -> None:
    package = project / "src" / project.name
    (package / "task.py").write_text((package / "task.py").read_text(encoding="utf-8") + READS_INIT_SCALE,
                                     encoding="utf-8")
    edit(package / "config.py", "    # Evaluation: it never changes the trained weights.\n",
         NEW_FIELD + "    # Evaluation: it never changes the trained weights.\n")
    if with_readme_row:
        readme = project / "README.md"
        row = next(line for line in readme.read_text(encoding="utf-8").splitlines(keepends=True)
                   if line.startswith("| `--dropout` |"))
        edit(readme, row, row + NEW_ROW)


def widen_by_default(project: Path) -> None:
    edit(project / "src" / project.name / "config.py", 'width: int = setting(16, ', 'width: int = setting(24, ')
    edit(project / "README.md", "| `--width` | 16 |", "| `--width` | 24 |")


def suite(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=project,
                          capture_output=True, text=True, timeout=1800)


def take_every_route(project: Path) -> Path:
    """The project with every route of its README's "Changing the settings" taken, as it says."""
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "### Changing the settings" in readme and "tests/test_routes.py" in readme
    ignore_dropout(project)
    add_init_scale(project)
    widen_by_default(project)
    return project


def ignore_dropout_and_data_seed(project: Path, take_them_out_of_config: bool = True) -> None:
    """A teaching project's task.py with no dropout and a fixed split, as its README says to do it."""
    package = project / "src" / project.name
    edit(package / "task.py", "dropout=config.dropout", "dropout=0.25")
    edit(package / "task.py", "load_arrays(DATASET, config.data_seed)", "load_arrays(DATASET, 7)")
    edit(package / "task.py", "derive_seed(config.data_seed, Stream.SPLIT)", "derive_seed(7, Stream.SPLIT)")
    if take_them_out_of_config:
        config = (package / "config.py").read_text(encoding="utf-8")
        for flag in ("--dropout", "--data-seed"):
            line = next(line for line in config.splitlines(keepends=True) if line.startswith(f'    add("{flag}", '))
            edit(package / "config.py", line, "")


def take_every_teaching_route(project: Path) -> Path:
    """The teaching project with its README's route taken, as "Bring your own task" says."""
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "tests/test_run_folder.py" in readme and "`--data-seed`" in readme and "`config.py`" in readme
    ignore_dropout_and_data_seed(project)
    return project


# The routes ride on combinations whose whole suites test_bake.py runs anyway (the routes change
# what their task reads and their defaults, not what their options chose): one suite each, not two.
SUITES = {ROUTED: BAKE_SUITES[ROUTED], TEACHING_ROUTED: BAKE_SUITES[TEACHING_ROUTED]}


@pytest.mark.suite(ROUTED)
def test_every_route_of_the_readme_done_as_it_says_keeps_the_whole_suite_green(background_suites):
    result = background_suites[ROUTED].result()  # its whole plain suite passed, routes taken
    project = result.project
    assert "init_scale" in (project / "src" / project.name / "config.py").read_text(encoding="utf-8")
    # The new setting was perturbed and changed the weights; the ignored one left them (the
    # suite's JUnit report names each case that passed).
    passed = {case.get("name") for case in ElementTree.parse(result.report).iter("testcase")
              if not {child.tag for child in case} & {"failure", "error", "skipped"}}
    assert any(re.fullmatch(r"test_\w+_changes_them\[init_scale\]", name) for name in passed), sorted(passed)
    assert any(re.fullmatch(r"test_\w+_leaves_them\[dropout\]", name) for name in passed), sorted(passed)


def test_each_route_with_a_step_left_out_fails_the_test_that_names_it(tmp_path):
    project = tasks.make_project(tmp_path)
    ignore_dropout(project, say_so_in_config=False)
    add_init_scale(project, with_readme_row=False)
    result = suite(project, "tests/test_config.py", "tests/test_settings.py", "-k",
                   "readme_table or changes_them")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "AssertionError: init_scale" in result.stdout  # the flags table lacks its row
    assert "--dropout 0.5 gave the weights of the run without it: if task.py ignores config.dropout, read it " \
           "there, or give dropout another effect in config.py" in result.stdout


@pytest.mark.suite(TEACHING_ROUTED)
def test_the_teaching_readmes_route_done_as_it_says_keeps_the_whole_suite_green(background_suites):
    result = background_suites[TEACHING_ROUTED].result()  # its plain suite passed, the route taken
    project = result.project
    config = (project / "src" / project.name / "config.py").read_text(encoding="utf-8")
    assert '"--dropout"' not in config and '"--data-seed"' not in config
    outcome = {case.get("name"): {child.tag for child in case} & {"failure", "error", "skipped"}
               for case in ElementTree.parse(result.report).iter("testcase")}
    weights = "test_each_setting_that_a_result_depends_on_changes_the_weights"
    assert {name: outcome[f"{weights}[{name}]"] for name in ("dropout", "data_seed", "width")} == \
        {"dropout": {"skipped"}, "data_seed": {"skipped"}, "width": set()}, outcome


def test_a_teaching_task_that_ignores_a_flag_config_py_still_has_fails_saying_what_to_do(tmp_path):
    project = tasks.make_project(tmp_path, scope="teaching")
    ignore_dropout_and_data_seed(project, take_them_out_of_config=False)
    result = suite(project, "tests/test_run_folder.py", "-k", "changes_the_weights")
    assert result.returncode == 1, result.stdout[-3000:]
    for name, flag in (("dropout", "--dropout"), ("data_seed", "--data-seed")):
        assert f"if task.py ignores config.{name}, read it there, or take {flag} out of config.py" in result.stdout
    assert "2 failed" in result.stdout.splitlines()[-1], result.stdout[-3000:]
