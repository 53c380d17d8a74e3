"""The generated README's other tasks, copied into a fresh project as task.py, pass the generated
test suite unmodified, in both sizes: the guarantees hold for whatever task a user brings, not for
the example's.

The language model and the regression are the code blocks of the research size's docs/tasks.md,
taken as a user copies them; task.py is one file for both sizes, so they go into a teaching
project unchanged too. Each project's plain `pytest` must pass with no failure and no error.
How long it takes against the example's suite (issue 18: at most 1.5 times) is measured by
benchmarks/tasks.py, with the same functions, rather than here: a test's time depends on what else
the machine runs.
"""

from __future__ import annotations

import pytest
from conftest import ROOT, load

tasks = load("tasks_benchmark", ROOT / "benchmarks" / "tasks.py")
pytestmark = pytest.mark.slow


def test_the_readme_holds_a_language_model_and_a_regression_as_whole_task_files():
    found = tasks.readme_tasks()
    assert sorted(found) == ["language_model", "regression"]
    for code in found.values():
        for promise in ("def make_datasets(config", "def make_model(config", "def batch_sums(",
                        "def metrics_from_sums(", "HEADLINE_METRIC = "):
            assert promise in code


@pytest.mark.parametrize("scope", ["research", "teaching"])
@pytest.mark.parametrize("name", ["language_model", "regression"])
def test_a_readme_task_passes_the_generated_suite_unmodified(name, scope, tmp_path):
    project = tasks.make_project(tmp_path, tasks.readme_tasks()[name], scope)
    result, seconds = tasks.plain_pytest(project)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    assert result.returncode == 0, result.stdout[-5000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    print(f"{name} ({scope}): plain pytest {seconds:.1f} s ({summary})")
