"""The generated README's other tasks, copied into a fresh project as task.py, pass the generated
test suite unmodified, in both sizes: the guarantees hold for whatever task a user brings, not for
the example's.

The language model, the regression and the small GPT are the code blocks of the research size's
docs/tasks.md, taken as a user copies them; task.py is one file for both sizes, so they go into a
teaching project unchanged too. Each project's plain `pytest` must pass with no failure and no
error, and the GPT's distributed tier (torchrun, FSDP included) too.
How long it takes against the example's suite (issue 18: at most 1.5 times) is measured by
benchmarks/tasks.py, with the same functions, rather than here: a test's time depends on what else
the machine runs.
"""

from __future__ import annotations

import pytest
from conftest import ROOT, load

tasks = load("tasks_benchmark", ROOT / "benchmarks" / "tasks.py")
pytestmark = pytest.mark.slow


def test_the_readme_holds_a_language_model_a_regression_and_a_gpt_as_whole_task_files():
    found = tasks.readme_tasks()
    assert sorted(found) == ["gpt", "language_model", "regression"]
    for code in found.values():
        for promise in ("def make_datasets(config", "def make_model(config", "def batch_sums(",
                        "def metrics_from_sums(", "HEADLINE_METRIC = "):
            assert promise in code
    assert "self.head.weight = self.embedding.weight" in found["gpt"]  # tied, as the FSDP tests need
    assert "def fsdp_blocks(model" in found["gpt"]


def passed(result, label: str) -> str:
    """The suite's summary line, after checking that it passed with no failure and no error."""
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    assert result.returncode == 0, result.stdout[-5000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, f"{label}: {summary}"
    return summary


@pytest.mark.parametrize("scope", ["research", "teaching"])
@pytest.mark.parametrize("name", ["language_model", "regression", "gpt"])
def test_a_readme_task_passes_the_generated_suite_unmodified(name, scope, tmp_path):
    project = tasks.make_project(tmp_path, tasks.readme_tasks()[name], scope)
    result, seconds = tasks.plain_pytest(project)
    print(f"{name} ({scope}): plain pytest {seconds:.1f} s ({passed(result, name)})")


def test_the_gpt_passes_the_generated_distributed_tier_unmodified_fsdp_included(tmp_path):
    """torchrun on gloo: DDP and FSDP at 2 ranks twice bitwise, killed and resumed, resumed at 1
    and 3 ranks; under FSDP its tied embedding and final norm belong to the root's unit."""
    project = tasks.make_project(tmp_path, tasks.readme_tasks()["gpt"], "research")
    result, seconds = tasks.plain_pytest(project, "-m", "distributed")
    summary = passed(result, "gpt, -m distributed")
    assert "skipped" not in summary, summary  # every torchrun test ran
    print(f"gpt (research): pytest -m distributed {seconds:.1f} s ({summary})")
