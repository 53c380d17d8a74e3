"""Shared facts about the template, for its tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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
