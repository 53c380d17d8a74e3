"""init_git: a baked project is a git repository, committed only under an identity the user set.

Every test here hides the machine's git settings (an empty HOME, no system config), so that git
knows who commits only when the test says so.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import COOKIECUTTER_JSON, IDENTITY, clean_git_env, cookiecutter_cli, post_gen


def context(**overrides) -> dict:
    values = {key: (value[0] if isinstance(value, list) else value)
              for key, value in COOKIECUTTER_JSON.items() if not key.startswith("_")}
    values.update(project_slug="my_project", **overrides)
    return values


def git(path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, env=env)


def commits(path, env=None) -> int:
    result = git(path, "rev-list", "--count", "HEAD", env=env)
    return int(result.stdout) if result.returncode == 0 else 0


@pytest.fixture
def home(tmp_path, monkeypatch):
    """This test process sees git without the machine's identity; returns the temporary HOME."""
    env = clean_git_env(tmp_path / "home")
    for key in [key for key in os.environ if key.startswith("GIT_")]:
        monkeypatch.delenv(key)
    for key in ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(key, env[key])
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path):
    path = tmp_path / "my_project"
    path.mkdir()
    (path / "README.md").write_text("# My Project\n", encoding="utf-8")
    (path / "pyproject.toml").write_text("[project]\nname = 'my_project'\n", encoding="utf-8")
    return path


@pytest.fixture
def identity(home, monkeypatch):
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)


# The hook's functions, one behaviour at a time.

def test_with_an_identity_the_project_gets_one_commit_and_a_clean_tree(project, identity):
    assert post_gen.init_git(project, "my_project") == []
    assert commits(project) == 1
    assert git(project, "status", "--porcelain").stdout == ""
    assert git(project, "log", "-1", "--format=%an <%ae>").stdout.strip() == "Ada Test <ada@example.org>"


def test_an_identity_in_the_git_config_counts_as_one(project, home):
    git(home, "config", "--global", "user.name", "Ada Test")
    git(home, "config", "--global", "user.email", "ada@example.org")
    assert post_gen.init_git(project, "my_project") == []
    assert commits(project) == 1


def test_a_name_without_an_e_mail_is_no_identity(project, home, monkeypatch):
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Test")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Ada Test")
    git(project, "init", "-q")
    assert not post_gen.has_identity(project)


def test_without_an_identity_the_files_are_staged_nothing_is_committed_and_the_note_says_how_to_commit(
        project, home):
    [note] = post_gen.init_git(project, "my_project")
    assert "nothing committed" in note and "cd my_project && git commit" in note
    assert (project / ".git").is_dir() and commits(project) == 0
    assert set(git(project, "diff", "--cached", "--name-only").stdout.split()) == {"README.md", "pyproject.toml"}


def test_running_twice_neither_initialises_nor_commits_again(project, identity):
    assert post_gen.init_git(project, "my_project") == []
    head = git(project, "rev-parse", "HEAD").stdout
    (project / "README.md").write_text("# Edited by the user\n", encoding="utf-8")
    [note] = post_gen.init_git(project, "my_project")
    assert "already inside a git repository" in note
    assert git(project, "rev-parse", "HEAD").stdout == head and commits(project) == 1
    assert git(project, "status", "--porcelain").stdout.strip() == "M README.md"  # the edit is not staged either


def test_a_project_baked_inside_another_repository_gets_no_nested_one(tmp_path, identity):
    outer = tmp_path / "monorepo"
    (outer / "my_project").mkdir(parents=True)
    git(outer, "init", "-q")
    post_gen.init_git(outer / "my_project", "my_project")
    assert not (outer / "my_project" / ".git").exists() and commits(outer) == 0


def test_an_outer_repository_named_in_git_variables_is_neither_used_nor_touched(project, tmp_path, identity,
                                                                                monkeypatch):
    """git sets GIT_DIR and GIT_INDEX_FILE for its hooks, for example when pre-commit runs these tests."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(outer / ".git" / "index"))
    assert post_gen.init_git(project, "my_project") == []
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert commits(project) == 1 and commits(outer) == 0


def test_without_git_installed_the_hook_says_so_in_one_line_and_succeeds(project, monkeypatch, capsys):
    monkeypatch.setattr(post_gen.shutil, "which", lambda name: None)
    monkeypatch.chdir(project)
    assert post_gen.main(context(author_name="Ada Test")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == ["note: git is not installed, so the project is not a git repository (pre-commit needs one)."]
    assert not (project / ".git").exists()


def test_init_git_false_leaves_git_alone(project, identity):
    assert post_gen.git_notes(project, context(init_git=False)) == []
    assert not (project / ".git").exists()


def test_under_cruft_git_is_left_alone_and_the_note_says_how_to_start_it(project, identity):
    """cruft marks its context with `_commit`; it re-bakes into scratch folders it compares file by file."""
    [note] = post_gen.git_notes(project, context(_commit="0123abc"))
    assert "cd my_project && git init && git add -A && git commit" in note
    assert not (project / ".git").exists()


def test_under_cruft_the_message_goes_to_stderr_so_that_cruft_diff_prints_the_patch_alone(project, monkeypatch,
                                                                                          capsys):
    monkeypatch.chdir(project)
    assert post_gen.main(context(_commit="0123abc")) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("Created my_project/.")


# Through cookiecutter's command line, as a user bakes.

def bake(tmp_path, env, *pairs):
    result = cookiecutter_cli(tmp_path / "out", "author_name=Ada Test", *pairs, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp_path / "out" / "my_project", result.stdout


def test_a_bake_with_an_identity_in_the_environment_is_one_clean_commit(tmp_path):
    env = clean_git_env(tmp_path / "home", **IDENTITY)
    project, stdout = bake(tmp_path, env)
    assert commits(project, env) == 1 and git(project, "status", "--porcelain", env=env).stdout == ""
    assert stdout.splitlines() == ["Created my_project/. Next steps: my_project/README.md, 'Quick start'."]


def test_a_bake_with_an_identity_in_the_git_config_is_one_clean_commit(tmp_path):
    env = clean_git_env(tmp_path / "home")
    for key, value in (("user.name", "Ada Test"), ("user.email", "ada@example.org")):
        subprocess.run(["git", "config", "--global", key, value], env=env, check=True)
    project, _ = bake(tmp_path, env)
    assert commits(project, env) == 1 and git(project, "status", "--porcelain", env=env).stdout == ""


def test_a_bake_without_an_identity_is_a_repository_with_nothing_committed_and_says_so(tmp_path):
    env = clean_git_env(tmp_path / "home")
    project, stdout = bake(tmp_path, env)
    assert (project / ".git").is_dir() and commits(project, env) == 0
    assert "nothing committed" in stdout and "git commit" in stdout


def test_a_bake_without_git_on_the_path_succeeds_and_says_so(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = clean_git_env(tmp_path / "home", PATH=str(empty))
    project, stdout = bake(tmp_path, env)
    assert not (project / ".git").exists()
    assert "git is not installed" in stdout


def test_a_bake_with_init_git_no_has_no_repository(tmp_path):
    env = clean_git_env(tmp_path / "home", **IDENTITY)
    project, stdout = bake(tmp_path, env, "init_git=no")
    assert not (project / ".git").exists() and "git" not in stdout

