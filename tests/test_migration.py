"""A project baked before the core (issue 42) moves over with `copier update`: its task.py is kept
byte for byte, every other file becomes what a fresh copy of today's template holds, and the tests
of a task pass with the user's. What moved is in CHANGELOG.md; the runs' weights are the same as
before (same keys, same order)."""

from __future__ import annotations

import filecmp
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import IDENTITY, ROOT, clean_git_env, copier_cli, copy_template, run_generated_suite
from test_copier import commit_all, git, tree

# main just before the core: the layout a project baked on 2026-12-02 has (utils/ with ranks and
# Ctrl-C plumbing, no engine/loader.py).
BEFORE_THE_CORE = "d0f92b9"
# A few of each size's own tests that exercise a task, the student files and the engine's loader.
TESTS_OF_A_TASK = {
    "research": ("tests/test_task_contract.py", "tests/test_data.py",
                 "tests/test_train.py::test_one_seed_in_two_fresh_processes_gives_identical_losses_and_weights"),
    "teaching": ("tests/test_two_runs_match.py", "tests/test_loader.py"),
}

pytestmark = pytest.mark.slow


def template_at(commit: str, folder: Path) -> Path:
    """The template's files at `commit`, from this clone's history (skips where a shallow clone lacks it)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"this clone has no commit {commit} (a shallow clone): {archive.stderr.decode().strip()}")
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as files:
        files.extractall(folder, filter="data")
    return folder


@pytest.mark.parametrize("scope", ["research", "teaching"])
def test_a_project_baked_before_the_core_updates_to_it_keeping_its_task_and_passing_a_tasks_tests(scope, tmp_path):
    env = clean_git_env(tmp_path / "home", **IDENTITY)
    template = template_at(BEFORE_THE_CORE, tmp_path / "template")
    git(template, "init", "-q", env=env)
    commit_all(template, "before the core", env)
    project = tmp_path / "projects" / "mine"
    copied = copier_cli("copy", "--trust", "--defaults", "--data", f"scope={scope}", str(template), str(project),
                        env=env)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    package = project / "src" / "my_project"
    assert "rank: int = 0" in (package / "utils" / "data.py").read_text(encoding="utf-8")  # the old layout
    task = package / "task.py"
    users_task = task.read_text(encoding="utf-8").replace("128", "96")  # the user's own model: a narrower layer
    assert users_task != task.read_text(encoding="utf-8")
    task.write_text(users_task, encoding="utf-8")
    commit_all(project, "My model", env)

    for path in template.iterdir():  # the template moves on to this commit's files
        if path.name != ".git":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    staged = copy_template(tmp_path / "staged")
    for path in staged.iterdir():
        shutil.move(str(path), template / path.name)
    commit_all(template, "the core", env)

    update = copier_cli("update", "--trust", "--defaults", cwd=project, env=env)
    assert update.returncode == 0, update.stdout + update.stderr
    assert task.read_text(encoding="utf-8") == users_task
    assert "rank" not in (package / "utils" / "data.py").read_text(encoding="utf-8")  # the new layout
    fresh = tmp_path / "projects" / "fresh"
    copied = copier_cli("copy", "--trust", "--defaults", "--data", f"scope={scope}", str(template), str(fresh),
                        env=env)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert tree(project) == tree(fresh)  # engine/loader.py there in the research size, nothing left behind
    _, differ, errors = filecmp.cmpfiles(fresh, project, sorted(tree(fresh)), shallow=False)
    assert (differ, errors) == (["src/my_project/task.py"], [])
    run_generated_suite(project, *TESTS_OF_A_TASK[scope])
