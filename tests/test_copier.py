"""copier makes the same project as cookiecutter, refuses what the hook refuses, and updates a project.

copier.yml is written by scripts/generate_copier.py from cookiecutter.json and the hooks; the first
tests check that it is current and that it says what cookiecutter.json says. The rest run copier's
command line (requirements-dev.txt pins it) on a scratch copy of the template, so that both tools
read the same files. The generated projects' own suites are test_bake.py's to run; here only a
grown project's tests of its task run.
"""

from __future__ import annotations

import filecmp
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from conftest import (
    COOKIECUTTER_JSON,
    IDENTITY,
    ROOT,
    clean_git_env,
    cookiecutter_cli,
    copier_cli,
    copy_template,
    load,
    pre_gen,
    run_generated_suite,
)
from test_bake import COMBINATIONS
from test_hooks import REFUSALS, REFUSED_BY_COOKIECUTTER, defaults

generator = load("generate_copier", ROOT / "scripts" / "generate_copier.py")
local_extensions = load("local_extensions", ROOT / "local_extensions.py")
COPIER_YML = yaml.safe_load((ROOT / "copier.yml").read_text(encoding="utf-8"))
OPTIONS = [key for key in COOKIECUTTER_JSON if not key.startswith("_")]
ANSWERS_FILE = ".copier-answers.yml"
README = (ROOT / "README.md").read_text(encoding="utf-8")
USER_LINE = "A line the user wrote."
TEMPLATE_LINE = "# A line the template added later."


def data(context: dict) -> list[str]:
    """`--data` arguments; booleans as copier and cookiecutter both read them."""
    return [arg for key, value in context.items()
            for arg in ("--data", f"{key}={str(value).lower() if isinstance(value, bool) else value}")]


def git(path: Path, *args: str, env) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=path, env=env, capture_output=True, text=True)


def commit_all(path: Path, message: str, env) -> None:
    for args in (("add", "-A"), ("commit", "-q", "--no-verify", "-m", message)):
        result = git(path, *args, env=env)
        assert result.returncode == 0, result.stderr


def tree(path: Path) -> set[str]:
    """Every file, less the repository (compared apart) and copier's answers file (copier alone writes one)."""
    return {p.relative_to(path).as_posix() for p in path.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(path).parts and p.name != ANSWERS_FILE}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """One scratch copy for every bake here, so that both tools read the very same files."""
    return copy_template(tmp_path_factory.mktemp("template") / "repro-template")


@pytest.fixture
def env(tmp_path):
    return clean_git_env(tmp_path / "home", **IDENTITY)


# copier.yml: one source of truth

def test_copier_yml_is_what_the_generator_writes_from_cookiecutter_json_and_the_hooks():
    """Fails when cookiecutter.json or the hooks changed and copier.yml was not regenerated."""
    assert (ROOT / "copier.yml").read_text(encoding="utf-8") == generator.generate(), (
        "copier.yml is stale: run python scripts/generate_copier.py")


def test_copier_asks_cookiecutters_questions_in_its_order_with_its_defaults_choices_and_help():
    questions = [key for key in COPIER_YML if not key.startswith("_") and key != "cookiecutter"]
    assert questions == OPTIONS
    prompts = COOKIECUTTER_JSON["__prompts__"]
    for key in OPTIONS:
        value, asked = COOKIECUTTER_JSON[key], COPIER_YML[key]
        prompt = prompts[key]["__prompt__"] if isinstance(prompts[key], dict) else prompts[key]
        assert asked["help"] == prompt, key
        if isinstance(value, list):
            labels = {choice: prompts[key].get(choice, choice) for choice in value}
            assert asked["choices"] == {label: choice for choice, label in labels.items()}, key
            assert asked["default"] == value[0], key
        elif isinstance(value, bool):
            assert (asked["type"], asked["default"]) == ("bool", value), key
        else:
            assert asked["type"] == "str", key
            assert asked["default"] == str(value).replace("cookiecutter.", ""), key


def test_each_answer_the_hook_checks_has_a_copier_validator_calling_that_same_check():
    validated = {key: question["validator"] for key, question in COPIER_YML.items()
                 if isinstance(question, dict) and "validator" in question}
    assert validated == {key: f"{{{{ refusal('{key}') }}}}" for key in pre_gen.ANSWER_CHECKS}


def test_copier_needs_trust_says_why_and_leaves_no_folder(template, tmp_path, env):
    result = copier_cli("copy", "--defaults", str(template), str(tmp_path / "my_project"), env=env)
    assert result.returncode != 0
    [reason] = [line for line in result.stderr.splitlines() if "unsafe" in line]
    assert reason == "Template uses potentially unsafe features: jinja_extensions, tasks."
    assert f"`{reason}`" in README  # quoted as copier prints it
    assert not (tmp_path / "my_project").exists()


# The same project from both tools

@pytest.mark.parametrize("combination", list(COMBINATIONS))
def test_copier_and_cookiecutter_make_identical_projects(combination, template, tmp_path, env):
    context = COMBINATIONS[combination]
    baked = cookiecutter_cli(tmp_path / "cookiecutter", *[f"{k}={v}" for k, v in context.items()],
                             env=env, template=template)
    assert baked.returncode == 0, baked.stdout + baked.stderr
    [ours] = (tmp_path / "cookiecutter").iterdir()
    theirs = tmp_path / "copier" / ours.name
    copied = copier_cli("copy", "--trust", "--defaults", *data(context), str(template), str(theirs), env=env)
    assert copied.returncode == 0, copied.stdout + copied.stderr

    assert tree(theirs) == tree(ours)
    _, differ, errors = filecmp.cmpfiles(ours, theirs, sorted(tree(ours)), shallow=False)
    assert differ == errors == []
    # init_git: a repository with its first commit under both, or no repository under both.
    for project in (ours, theirs):
        assert (project / ".git").is_dir() == context.get("init_git", True), project
    if context.get("init_git", True):
        assert git(theirs, "status", "--porcelain", env=env).stdout == ""  # the answers file committed too
        assert git(theirs, "rev-list", "--count", "HEAD", env=env).stdout.strip() == "1"
    # The closing message, from the same hook (copier pads its output with blank lines).
    assert [line for line in copied.stdout.splitlines() if line] == baked.stdout.splitlines()


def test_copier_records_every_answer_and_the_template_in_its_answers_file(template, tmp_path, env):
    context = COMBINATIONS["awkward_names_off_no_license"]
    project = tmp_path / "project"
    copied = copier_cli("copy", "--trust", "--defaults", *data(context), str(template), str(project), env=env)
    assert copied.returncode == 0, copied.stderr
    answers = yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))
    assert answers.pop("_src_path") == str(template)
    expected = defaults(project_slug="o_brien_quoted_back_slash", **context)
    assert answers == expected
    assert not (project / "LICENSE").exists()


# Refusals: the hook's checks, at copier's questions

@pytest.mark.parametrize("context, message", REFUSALS.values(), ids=REFUSALS.keys())
def test_copier_refuses_what_the_hook_refuses_at_the_question_with_the_same_reason_and_leaves_no_folder(
        context, message, template, tmp_path, env):
    answers = defaults(**context)
    if "project_slug" not in context:  # derived from the name, as both tools derive it
        answers["project_slug"] = local_extensions.identifier(answers["project_name"])
    reason = pre_gen.validate(answers)
    [question] = [key for key, check in pre_gen.ANSWER_CHECKS.items() if check(answers)]
    assert message in reason

    result = copier_cli("copy", "--trust", "--defaults", *data(context), str(template), str(tmp_path / "out"),
                        env=env)
    assert result.returncode != 0
    assert result.stderr.rstrip().splitlines()[-1] == (
        f"ValueError: Validation error for question '{question}': {reason}"), result.stderr
    assert not (tmp_path / "out").exists()


def test_a_name_whose_plain_package_name_is_refused_copies_with_every_default(template, tmp_path, env):
    """copier checks a default before it offers it: `Random` must derive a package name it takes."""
    project = tmp_path / "random"
    result = copier_cli("copy", "--trust", "--defaults", "--data", "project_name=Random", str(template), str(project),
                        env=env)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))["project_slug"] == "random_project"
    assert (project / "src" / "random_project" / "train.py").is_file()


# What cookiecutter refuses itself, before its hook runs: copier refuses it too, at the question. A
# choice outside the list by copier's own `choices`; a yes/no that is neither by the hook's
# check_yes_no, since copier would read `maybe` as yes. The last line of copier's traceback:
COPIER_REFUSES = {
    "dataset not a choice": "ValueError: Invalid choice for 'dataset': 'Digits' is not in ['synthetic', 'digits']",
    "license not a choice": (
        "ValueError: Invalid choice for 'license': 'GPL' is not in ['MIT', 'BSD-3-Clause', 'Apache-2.0', 'none']"),
    "init_git not a boolean": ("ValueError: Validation error for question 'init_git': "
                               "init_git must be true or false (or yes, no, 1, 0...), not 'maybe'"),
    "package name over a folder name's limit": (
        "ValueError: Validation error for question 'project_slug': the package name is 256 characters long, over "
        "the 32 that keep the generated code's lines within its linter's 120 columns: choose a shorter project_slug"),
}


@pytest.mark.parametrize("refusal", list(REFUSED_BY_COOKIECUTTER))
def test_copier_refuses_what_cookiecutter_itself_refuses_at_the_question_and_leaves_no_folder(
        refusal, template, tmp_path, env):
    context, _ = REFUSED_BY_COOKIECUTTER[refusal]
    result = copier_cli("copy", "--trust", "--defaults", *data(context), str(template), str(tmp_path / "out"),
                        env=env)
    assert result.returncode != 0
    assert result.stderr.rstrip().splitlines()[-1] == COPIER_REFUSES[refusal], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("word, value", [("yes", True), ("No", False)])
def test_copier_takes_the_yes_no_words_cookiecutter_takes(word, value, template, tmp_path, env):
    project = tmp_path / "project"
    result = copier_cli("copy", "--trust", "--defaults", "--data", f"init_git={word}", str(template), str(project),
                        env=env)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))["init_git"] is value
    assert (project / ".git").is_dir() is value


def test_the_readme_quotes_what_copier_really_prints_for_a_refused_answer(template, tmp_path, env):
    result = copier_cli("copy", "--trust", "--defaults", "--data", "project_slug=class", str(template),
                        str(tmp_path / "out"), env=env)
    assert f"`{result.stderr.rstrip().splitlines()[-1]}`" in README
    assert f"`{COPIER_REFUSES['dataset not a choice']}`" in README  # checked against copier above


# Updates

def test_copier_update_brings_a_template_change_in_and_the_users_edit_survives(tmp_path, env):
    """Bake from one commit of the template, edit the project, change the template, update."""
    template = copy_template(tmp_path / "template")
    git(template, "init", "-q", env=env)
    commit_all(template, "template v1", env)
    project = tmp_path / "projects" / "my_project"
    # A non-default option too: a pruned file must stay pruned through the update's re-renders.
    copied = copier_cli("copy", "--trust", "--defaults", "--data", "pre_commit=false", str(template), str(project),
                        env=env)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    # The hook's task made the repository and its first commit, answers file included: ready to update.
    assert git(project, "status", "--porcelain", env=env).stdout == ""
    check = copier_cli("check-update", cwd=project, env=env)
    assert check.returncode == 0 and "up-to-date" in (check.stdout + check.stderr).lower(), check.stderr

    with (project / "README.md").open("a", encoding="utf-8") as readme:
        readme.write(f"\n{USER_LINE}\n")
    commit_all(project, "The user's edit", env)
    with (template / "{{cookiecutter.project_slug}}" / ".gitignore").open("a", encoding="utf-8") as ignore:
        ignore.write(f"{TEMPLATE_LINE}\n")
    commit_all(template, "template v2", env)

    update = copier_cli("update", "--trust", "--defaults", cwd=project, env=env)
    assert update.returncode == 0, update.stdout + update.stderr
    assert TEMPLATE_LINE in (project / ".gitignore").read_text(encoding="utf-8")
    assert USER_LINE in (project / "README.md").read_text(encoding="utf-8")
    assert not (project / ".pre-commit-config.yaml").exists()
    answers = yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))
    assert answers["_commit"] == git(template, "describe", "--tags", "--always", env=env).stdout.strip()
    assert answers["pre_commit"] is False
    changed = {line[3:] for line in git(project, "status", "--porcelain", env=env).stdout.splitlines()}
    assert changed == {".gitignore", ANSWERS_FILE}  # the update left the rest alone: no second git init

    commit_all(project, "Update from the template", env)
    check = copier_cli("check-update", cwd=project, env=env)
    assert check.returncode == 0 and "up-to-date" in (check.stdout + check.stderr).lower(), check.stderr


def train_hash(project: Path, flags: list[str], env) -> str:
    """The weights_sha256 of `python -m my_project.train FLAGS` in `project`, in a fresh process."""
    result = subprocess.run([sys.executable, "-m", "my_project.train", *flags], cwd=project, capture_output=True,
                            text=True, env={**env, "PYTHONPATH": str(project / "src")}, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return re.search(r"weights_sha256 ([0-9a-f]{64})", result.stdout).group(1)


@pytest.mark.slow
def test_a_teaching_project_grows_into_the_research_size_by_copier_update_and_keeps_its_task(tmp_path, env):
    """The template README's "Growing up": a teaching project whose task.py the user changed,
    updated with `--data scope=research`, is the research project with that task.py: file for file
    what `copier copy --data scope=research` makes, but task.py, and the research size's own
    tests of a task pass with the user's; with the flags its README gives, it trains the teaching
    recipe to the same weights. (That project's whole suite passes: test_bake.py runs it
    on cookiecutter's defaults, which test_copier_and_cookiecutter_make_identical_projects shows
    copier makes too; test_tasks.py runs it with other tasks.)"""
    template = copy_template(tmp_path / "repro-template")
    git(template, "init", "-q", env=env)
    commit_all(template, "template", env)
    project = tmp_path / "course"
    # As the README types it: the template by a relative path, from the folder that holds it.
    copied = copier_cli("copy", "--trust", "--defaults", "--data", "scope=teaching", "repro-template", "course",
                        cwd=tmp_path, env=env)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))["_src_path"] == str(template)
    taught = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    package = project / "src" / "my_project"  # the package is named after the project's name, not the folder
    assert (project / "notebooks").is_dir() and not (package / "engine").exists()
    task = package / "task.py"
    users_task = task.read_text(encoding="utf-8").replace("128", "96")  # the user's own model: a narrower layer
    assert users_task != task.read_text(encoding="utf-8")
    task.write_text(users_task, encoding="utf-8")
    own = "scikit-learn>=1.2  # the task's own package, where its README puts it\n"
    (project / "requirements-task.txt").write_text(own, encoding="utf-8")
    commit_all(project, "My model", env)
    short = ["--epochs", "2", "--max-samples", "128", "--batch-size", "32", "--device", "cpu", "--seed", "5"]
    taught = train_hash(project, [*short, "--out", str(tmp_path / "runs" / "teaching")], env)

    block = README.split("**Growing up.**")[1].split("```bash\n")[1].split("```")[0]
    typed = [line.split("#")[0].strip() for line in block.splitlines()]
    assert typed[1] == "copier update --trust --defaults --data scope=research"
    update = copier_cli(*typed[1].split()[1:], cwd=project, env=env)  # inside the project, as the README says
    assert update.returncode == 0, update.stdout + update.stderr
    # The README's reinstall: the research size needs packages the teaching size never installed.
    assert typed[2] == 'python -m pip install -e ".[dev]"'
    needs = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert {"tqdm>=4.60", "matplotlib>=3.8"} <= set(needs) - set(taught)
    assert task.read_text(encoding="utf-8") == users_task
    assert (project / "requirements-task.txt").read_text(encoding="utf-8") == own  # never the template's
    assert "requirements-task.txt" in (project / "README.md").read_text(encoding="utf-8")
    assert git(project, "status", "--porcelain", env=env).stdout.count("requirements-task.txt") == 0
    assert yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8"))["scope"] == "research"
    assert "torchrun" in (package / "train.py").read_text(encoding="utf-8")

    fresh = tmp_path / "fresh"
    copied = copier_cli("copy", "--trust", "--defaults", "--data", "scope=research", str(template), str(fresh),
                        env=env)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert tree(project) - {"requirements-task.txt"} == tree(fresh)  # the engine and tools, not the notebook
    _, differ, errors = filecmp.cmpfiles(fresh, project, sorted(tree(fresh)), shallow=False)
    assert (differ, errors) == (["src/my_project/task.py"], [])
    assert yaml.safe_load((project / ANSWERS_FILE).read_text(encoding="utf-8")) == \
        yaml.safe_load((fresh / ANSWERS_FILE).read_text(encoding="utf-8"))
    # The research README's line: these flags train the teaching recipe, bit for bit; the control: without them the
    # research defaults (one-cycle, weight decay) give other weights.
    line = next(line for line in (project / "README.md").read_text(encoding="utf-8").split("\n\n")
                if line.startswith("A project grown from the teaching size"))
    flags = re.search(r"bit for bit with `([^`]+)`", " ".join(line.split())).group(1).split()
    assert flags == ["--schedule", "constant", "--weight-decay", "0"]
    assert train_hash(project, [*short, *flags, "--out", str(tmp_path / "runs" / "grown")], env) == taught
    assert train_hash(project, [*short, "--out", str(tmp_path / "runs" / "defaults")], env) != taught
    run_generated_suite(project, "tests/test_task_contract.py",
                        "tests/test_train.py::test_one_seed_in_two_fresh_processes_gives_identical_losses_and_weights")
