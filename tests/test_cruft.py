"""A project made with cruft stays linked to the template: check, diff and update work, edits survive.

The template is copied (as it is in the working tree) into a scratch git repository, since cruft
clones templates with git. The project's own test suite is not run here: test_bake.py does that.

init_git is left at its default (true) on purpose, because that is what a user gets: under cruft
the post-generation hook leaves git alone (cruft re-bakes into scratch folders and compares them
with `git diff --no-index`, which would take a .git folder for project files, and it writes
.cruft.json only after the hook). So the test then does what the hook's note tells the user to
do: `git init && git add -A && git commit`. `cruft update` needs that: it refuses to patch a git
project whose tree is not clean, and in a repository it applies the template's change as a
three-way merge, which is what keeps the user's edits.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import IDENTITY, clean_git_env, cookiecutter_cli, copy_template

USER_LINE = "A line the user wrote."
TEMPLATE_LINE = "# A line the template added later."


def run(*args: str, cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True)


def cruft(*args: str, cwd, env) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "cruft", *args, cwd=cwd, env=env)


def commit_all(path, message: str, env) -> None:
    for args in (("add", "-A"), ("commit", "-q", "--no-verify", "-m", message)):
        result = run("git", *args, cwd=path, env=env)
        assert result.returncode == 0, result.stderr


def test_cruft_creates_checks_diffs_and_updates_a_project_and_the_users_edit_survives(tmp_path):
    env = clean_git_env(tmp_path / "home", **IDENTITY)
    template = copy_template(tmp_path / "template")
    run("git", "init", "-q", cwd=template, env=env)
    commit_all(template, "template v1", env)

    created = cruft("create", str(template), "--no-input", "--output-dir", str(tmp_path / "projects"),
                    cwd=tmp_path, env=env)
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "projects" / "my_project"
    assert (project / ".cruft.json").is_file() and (project / "src" / "my_project").is_dir()
    assert not (project / ".git").exists() and "under cruft" in created.stderr  # git is left to the user

    run("git", "init", "-q", cwd=project, env=env)  # what the hook's note says to do
    commit_all(project, "Initial commit", env)
    check = cruft("check", cwd=project, env=env)
    assert check.returncode == 0 and "up to date" in check.stdout, check.stdout + check.stderr

    with (project / "README.md").open("a", encoding="utf-8") as readme:
        readme.write(f"\n{USER_LINE}\n")
    commit_all(project, "The user's edit", env)
    with (template / "{{cookiecutter.project_slug}}" / ".gitignore").open("a", encoding="utf-8") as ignore:
        ignore.write(f"{TEMPLATE_LINE}\n")
    commit_all(template, "template v2", env)

    check = cruft("check", cwd=project, env=env)
    assert check.returncode != 0 and "out of date" in check.stdout, check.stdout + check.stderr

    diff = cruft("diff", cwd=project, env=env)  # the project against the template it was made from
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith("diff --git"), diff.stdout  # the hook's message went to stderr: a clean patch
    assert f"-{USER_LINE}" in diff.stdout and "README.md" in diff.stdout

    update = cruft("update", "--skip-apply-ask", cwd=project, env=env)
    assert update.returncode == 0, update.stdout + update.stderr
    assert TEMPLATE_LINE in (project / ".gitignore").read_text(encoding="utf-8")
    assert USER_LINE in (project / "README.md").read_text(encoding="utf-8")
    template_head = run("git", "rev-parse", "HEAD", cwd=template, env=env).stdout.strip()
    assert json.loads((project / ".cruft.json").read_text(encoding="utf-8"))["commit"] == template_head

    commit_all(project, "Update from the template", env)
    check = cruft("check", cwd=project, env=env)
    assert check.returncode == 0, check.stdout + check.stderr


def test_cruft_bakes_the_teaching_size_and_grows_it_into_the_research_size_keeping_the_task(tmp_path):
    """`cruft create` with scope=teaching makes cookiecutter's teaching project; `cruft update
    --variables-to-update '{"scope": "research"}'` turns it into the research size, and the user's
    task.py survives (test_copier.py shows that such a project is the research one but task.py)."""
    env = clean_git_env(tmp_path / "home", **IDENTITY)
    template = copy_template(tmp_path / "template")
    run("git", "init", "-q", cwd=template, env=env)
    commit_all(template, "template", env)
    created = cruft("create", str(template), "--no-input", "--output-dir", str(tmp_path / "projects"),
                    "--extra-context", json.dumps({"scope": "teaching"}), cwd=tmp_path, env=env)
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "projects" / "my_project"
    baked = cookiecutter_cli(tmp_path / "cookiecutter", "scope=teaching", "init_git=no", env=env, template=template)
    assert baked.returncode == 0, baked.stderr
    files = {path.relative_to(project).as_posix() for path in project.rglob("*") if path.is_file()} - {".cruft.json"}
    reference = tmp_path / "cookiecutter" / "my_project"
    assert files == {path.relative_to(reference).as_posix() for path in reference.rglob("*") if path.is_file()}

    run("git", "init", "-q", cwd=project, env=env)
    commit_all(project, "Initial commit", env)
    task = project / "src" / "my_project" / "task.py"
    users_task = task.read_text(encoding="utf-8") + "# the user's own line\n"
    task.write_text(users_task, encoding="utf-8")
    commit_all(project, "My task", env)
    update = cruft("update", "--skip-apply-ask", "--variables-to-update", json.dumps({"scope": "research"}),
                   cwd=project, env=env)
    assert update.returncode == 0, update.stdout + update.stderr
    assert task.read_text(encoding="utf-8") == users_task
    assert (project / "src" / "my_project" / "engine").is_dir() and not (project / "notebooks").exists()
    assert json.loads((project / ".cruft.json").read_text(encoding="utf-8"))["context"]["cookiecutter"]["scope"] == \
        "research"
