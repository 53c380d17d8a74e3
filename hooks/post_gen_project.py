"""Removes the files that the chosen options turned off, makes the project a git repository, and
says in a few lines where to go next.

Standard library only, and safe to run twice: it deletes only the named paths inside the new
project, and only when they exist, and never re-initialises or re-commits a repository. cruft
runs this hook again on every `cruft diff` and `cruft update`, in scratch folders of its own, so
the message is short and git is left alone there (see git_notes).

copier runs the same main() as a task after `copier copy` (see copier.yml), with the answers as
the first argument; there the files are pruned already (copier.yml's _exclude calls
paths_to_remove), so prune() finds nothing left to do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PLACEHOLDER_AUTHOR = "Your Name"  # cookiecutter.json's default author_name
FIRST_COMMIT_MESSAGE = "Initial commit from repro-template"
# Set when git runs this process from one of its own hooks (a test run by pre-commit, say): they
# would point `git init` and `git add` at that other repository instead of the new project.
REPOSITORY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


# The README's first section, by language: where the closing message sends the user.
QUICK_START = {"en": "Quick start", "zh": "快速上手"}


# What one size of the project has and the other has not (paths in the project; {package} is the
# package's folder). The files both have, utils/ and task.py among them, are the same in both;
# a file whose content differs by size has one template file per size, named with a condition
# (train.py, config.py, tests/conftest.py, README.md), and is not listed here.
RESEARCH_ONLY = (
    "src/{package}/engine", "src/{package}/verify.py", "src/{package}/compare.py",
    "src/{package}/evaluate.py", "src/{package}/doctor.py", "src/{package}/study.py", "src/{package}/plot.py",
    "src/{package}/__main__.py", "src/{package}/operations.py",
    "slurm", "docs",
    *(f"tests/test_{name}.py" for name in (
        "checkpoint", "cluster", "commands", "config", "ctrl_c", "cudnn", "data", "distributed", "evaluate",
        "failures", "fingerprint", "fsdp", "fsdp_precision", "invariance", "loop", "machine", "nonfinite", "one_writer",
        "parallel_suite", "plot", "precision", "resume", "run_files", "settings", "steps", "stop_signals", "study",
        "task_contract", "tools", "tracking", "train", "world_sizes")),
    # Exercises about what the teaching size leaves out: accumulation, mid-epoch resume, cuDNN on a GPU.
    "exercises/10-cudnn-benchmark", "exercises/11-micro-batches-share-one-key",
    "exercises/12-loader-position-not-restored",
)
TEACHING_ONLY = (
    "notebooks",
    *(f"tests/test_{name}.py" for name in ("workers", "run_folder", "notebook")),
)


def paths_to_remove(context: dict) -> list[str]:
    only_other_size = TEACHING_ONLY if context.get("scope", "research") == "research" else RESEARCH_ONLY
    remove = [path.format(package=context["project_slug"]) for path in only_other_size]
    if context["license"] == "none":
        remove.append("LICENSE")
    if not context["github_actions"]:
        remove.append(".github")
    if not context["pre_commit"]:
        remove.append(".pre-commit-config.yaml")
    if not context.get("exercises", True):
        remove.append("exercises")
    return remove


def prune(project_dir: Path, context: dict) -> None:
    for relative in paths_to_remove(context):
        path = project_dir / relative
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def git(project_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in REPOSITORY_VARIABLES}
    return subprocess.run(["git", *args], cwd=project_dir, env=env, capture_output=True, text=True)


def last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def inside_a_repository(project_dir: Path) -> bool:
    return git(project_dir, "rev-parse", "--is-inside-work-tree").stdout.strip() == "true"


def has_identity(project_dir: Path) -> bool:
    """Whether the user told git who commits (user.name and user.email, or GIT_AUTHOR_*/GIT_COMMITTER_*).

    Without them git either refuses to commit or guesses from the login and host name; a first
    commit under a guessed name would have to be rewritten, so none is made.
    """
    for field in ("name", "email"):
        configured = git(project_dir, "config", f"user.{field}").stdout.strip()
        for role in ("AUTHOR", "COMMITTER"):
            if not (configured or os.environ.get(f"GIT_{role}_{field.upper()}", "").strip()):
                return False
    return True


def init_git(project_dir: Path, folder: str) -> list[str]:
    """Makes the project a git repository, everything staged, and commits if git knows who commits.

    Returns the notes for the user: none when the first commit was made.
    """
    if shutil.which("git") is None:
        return ["note: git is not installed, so the project is not a git repository (pre-commit needs one)."]
    if inside_a_repository(project_dir):
        # A second run over the same folder, or a project baked inside another repository (a
        # monorepo): that history belongs to the user, so no nested repository and no commit.
        return [f"note: {folder}/ is already inside a git repository; git was left as it is."]
    for args in (("init", "-q"), ("add", "-A")):
        result = git(project_dir, *args)
        if result.returncode:
            return [f"note: 'git {args[0]}' failed ({last_line(result)}); {folder}/ has no first commit."]
    how_to_commit = f"cd {folder} && git commit -m 'Initial commit'"
    if not has_identity(project_dir):
        return [f"note: {folder}/ is a git repository, files staged, nothing committed (git has no "
                f"user.name/user.email); set them with git config --global, then: {how_to_commit}"]
    # --no-verify: the user's own git hooks (pre-commit's init-templatedir, say) would otherwise set
    # up their environments in the middle of a bake; these files are the template's, linted by its tests.
    result = git(project_dir, "commit", "-q", "--no-verify", "-m", FIRST_COMMIT_MESSAGE)
    if result.returncode:
        return [f"note: {folder}/ is a git repository, but the first commit failed ({last_line(result)}); "
                f"{how_to_commit}"]
    return []


def under_cruft(context: dict) -> bool:
    return "_commit" in context  # cruft adds the template's commit to the context; cookiecutter does not


def folder_name(context: dict) -> str:
    """The project folder's name: the package name under cookiecutter and cruft; under copier the
    destination the user gave, which copier passes as `_folder_name`."""
    return context.get("_folder_name") or context["project_slug"]


def git_notes(project_dir: Path, context: dict) -> list[str]:
    if not context.get("init_git"):
        return []
    folder = folder_name(context)
    if under_cruft(context):
        # cruft bakes into scratch folders on create, diff and update and compares them with `git
        # diff --no-index`, which would take a .git folder made here for project files; and on
        # create it writes .cruft.json after this hook, so a commit made here would leave it out.
        return [f"note: under cruft, git is yours to start: cd {folder} && git init && git add -A && git commit"]
    return init_git(project_dir, folder)


def next_steps(context: dict, project_dir: Path, notes: list[str]) -> str:
    """A short message: cruft prints it again on every diff and update."""
    slug, folder = context["project_slug"], folder_name(context)
    section = QUICK_START[context.get("language", "en")]
    lines = [f"Created {folder}/. Next steps: {folder}/README.md, '{section}'.", *notes]
    if slug == "project" and not any(c.isascii() and c.isalpha() for c in str(context["project_name"])):
        lines.append("note: the package is called 'project' because the project name has no Latin letters; "
                     "to choose another, answer the package-name prompt or bake with project_slug=<name>.")
    license_file = project_dir / "LICENSE"
    if license_file.is_file() and PLACEHOLDER_AUTHOR in license_file.read_text(encoding="utf-8"):
        lines.append(f"note: {folder}/LICENSE names the placeholder '{PLACEHOLDER_AUTHOR}' as copyright holder; "
                     "bake with author_name=..., or put your name in LICENSE and pyproject.toml.")
    return "\n".join(lines)


def main(context: dict) -> int:
    project_dir = Path.cwd()  # cookiecutter runs this hook inside the new project
    prune(project_dir, context)
    message = next_steps(context, project_dir, git_notes(project_dir, context))
    # Under cruft, stderr: `cruft diff` writes its patch to stdout, and `cruft diff > update.patch`
    # should hold the patch alone.
    print(message, file=sys.stderr if under_cruft(context) else sys.stdout)
    return 0


if __name__ == "__main__":
    # cookiecutter renders this file before running it, so the raw string holds the context as JSON;
    # copier runs the file as it is in the template and passes the same JSON as the first argument.
    sys.exit(main(json.loads(sys.argv[1] if len(sys.argv) > 1 else r"""{{ cookiecutter|tojson }}""")))
