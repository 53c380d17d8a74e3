"""The generated test suite's time with the README's other tasks as task.py, against the example's.

    python benchmarks/tasks.py [--repeats 2] [--json benchmarks/results-tasks.json]

Bakes the template with its defaults once for the example as it comes, and once for each task of
the generated docs/tasks.md (a language model, a regression, a small GPT) copied in as task.py, as
a user copies them. Then runs each project's plain `pytest`, all taking turns in every round so
that a machine that slows down slows all alike, and reports each task's suite time against the
example's: the median over the rounds of the per-round ratios (below 1.5 is issue 18's target).

Measured here and not in a test: a test's time depends on what else the machine runs.
tests/test_tasks.py uses the same functions to prove that each suite passes, unmodified.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The generated project's page of other tasks (docs/tasks.md, English), which holds them as code blocks.
TASKS_PAGE = ROOT / "{{cookiecutter.project_slug}}" / "docs" / (
    "{% if cookiecutter.language == 'en' %}tasks.md{% endif %}")
TASK_BLOCK = re.compile(r"```python\n(# task\.py: (.+?)\n.*?)```", re.DOTALL)
NAMES = {"a next-token language model on a small made-up text": "language_model",
         "a regression, MSE loss and mean absolute error": "regression",
         "a small GPT, character-level, with tied embeddings": "gpt"}


def readme_tasks() -> dict[str, str]:
    """The complete task.py files of the generated docs/tasks.md, by short name (`language_model`,
    `regression`, `gpt`)."""
    text = TASKS_PAGE.read_text(encoding="utf-8")
    return {NAMES.get(match.group(2), match.group(2)): match.group(1) for match in TASK_BLOCK.finditer(text)}


def make_project(folder: Path, task_code: str | None = None, scope: str = "research") -> Path:
    """The template baked with its defaults, at the size `scope`, into `folder`; `task_code`, if
    given, as its task.py."""
    from cookiecutter.main import cookiecutter

    project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(folder),
                                extra_context={"init_git": False, "scope": scope}))
    if task_code is not None:
        put_task(project, task_code)
    return project


def put_task(project: Path, task_code: str) -> None:
    """`task_code` as the baked `project`'s task.py, as a user who ports a task replaces it."""
    (project / "src" / project.name / "task.py").write_text(task_code, encoding="utf-8")


def plain_pytest(project: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The project's plain `pytest` (with `args`: `-m distributed`, say) in a fresh process: (the
    result, wall seconds)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=project,
                            capture_output=True, text=True, env=env, timeout=1800)
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the suites (default: 2)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    seconds: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        projects = {"example": make_project(Path(scratch) / "example")}
        projects |= {name: make_project(Path(scratch) / name, code) for name, code in readme_tasks().items()}
        for round_ in range(args.repeats):
            for name, project in projects.items():
                result, taken = plain_pytest(project)
                summary = (result.stdout.strip().splitlines() or [""])[-1]
                if result.returncode != 0:
                    print(f"error: {name}'s suite failed: {summary}", file=sys.stderr)
                    return 1
                seconds.setdefault(name, []).append(taken)
                print(f"round {round_ + 1}: {name} {taken:.1f} s ({summary})", flush=True)
    results = {f"{name}_suite_vs_example": statistics.median(
        task / example for task, example in zip(times, seconds["example"], strict=True))
        for name, times in seconds.items() if name != "example"}
    results["suite_seconds"] = seconds
    results["machine"] = {
        "date": datetime.date.today().isoformat(), "platform": platform.platform(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "torch": importlib.metadata.version("torch"),
        "command": "python benchmarks/tasks.py " + " ".join(sys.argv[1:]),
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}
    for name, ratio in results.items():
        if name.endswith("_vs_example"):
            print(f"{name}: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
