"""Each named option combination bakes, lints clean, and passes its own test suite.

The combinations use every choice value at least once. Each is baked once per session
(pytest-cookies' cookies_session) and then checked by the tests below.
"""

from __future__ import annotations

import py_compile
import re
import site
import subprocess
import sys
import venv
from pathlib import Path
from xml.etree import ElementTree

import jinja2
import pytest
import yaml

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conftest import (
    AWKWARD_NAME,
    COOKIECUTTER_JSON,
    COPIER_ANSWERS_TEMPLATE,
    NOT_SAME_IN_EVERY_TIER,
    OTHER_BAKES,
    ROOT,
    SAME_IN_EVERY_BAKE,
    SAME_IN_EVERY_TIER,
    TEMPLATE_DIR,
    Suite,
    bake,
    cookiecutter_cli,
    load,
    outcomes,
    post_gen,
    pre_gen,
    ran_and_passed,
)

COMBINATIONS = {
    "defaults": {},
    "digits_warn_bsd_no_actions": {
        "dataset": "digits", "determinism": "warn", "license": "BSD-3-Clause", "github_actions": False,
        "exercises": False, "seed": "0",
    },
    "awkward_names_off_no_license": {
        "project_name": AWKWARD_NAME, "author_name": AWKWARD_NAME, "description": AWKWARD_NAME,
        "author_email": "", "license": "none", "seed": "4294967295", "language": "zh",
        "determinism": "off", "pre_commit": False, "python_version": "3.11", "init_git": False,
    },
    "teaching": {"scope": "teaching"},
    "teaching_digits_zh_warn_apache": {
        "scope": "teaching", "dataset": "digits", "language": "zh", "determinism": "warn", "seed": "007",
        "pre_commit": False, "license": "Apache-2.0",
    },
}
# Each research combination costs CI a whole research suite (minutes): a choice that changes no
# code the suite runs (a licence, a Python version, pre-commit, git) rides on a combination that
# is there for another reason, and the teaching ones, whose suites take a minute, take the rest.

# The torchrun tier (minutes) for the combination whose options change what it trains: the digits
# set (an odd size, which the ranks must pad) under warn, less conftest.SAME_IN_EVERY_TIER. The
# defaults' options under torchrun are the GPT task's project's (test_tasks.py runs its whole tier:
# DDP and FSDP), with another task.py.
DISTRIBUTED_COMBINATIONS = ("digits_warn_bsd_no_actions",)

# Folders that are not project files: caches, and the repository that init_git makes.
NOT_PROJECT_FILES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".git"}


def expected_files(context: dict) -> set[str]:
    """Every file of the template folder, named for this project, less what the post-gen hook prunes.

    Derived rather than listed, so that a module added to the template needs no edit here, while a
    pruning mistake (a file kept or removed against the options) or a stray file still fails.
    """
    pruned = post_gen.paths_to_remove(context)
    files = set()
    for relative in project_files(TEMPLATE_DIR) - {COPIER_ANSWERS_TEMPLATE}:  # copier's alone
        # Names are templates too: the slug, and per-language files whose name renders empty
        # (not written) in a project of the other language.
        name = jinja2.Environment().from_string(relative).render(cookiecutter=context)
        if name.endswith("/") or name.split("/")[-1] == "":
            continue
        if not any(name == path or name.startswith(f"{path}/") for path in pruned):
            files.add(name)
    return files


def project_files(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*")
            if p.is_file() and not NOT_PROJECT_FILES & set(p.relative_to(path).parts)}


@pytest.fixture(scope="session", params=list(COMBINATIONS))
def baked(request, cookies_session):
    result = cookies_session.bake(extra_context=COMBINATIONS[request.param],
                                  template=str(Path(__file__).resolve().parents[1]))
    assert result.exit_code == 0, result.exception
    result.combination = request.param
    return result


def test_every_key_the_tests_pass_exists_in_cookiecutter_json():
    """cookiecutter silently ignores an unknown key, which would make a test check nothing."""
    from test_hooks import REFUSALS, REFUSED_BY_COOKIECUTTER

    passed = {key for context in COMBINATIONS.values() for key in context}
    passed |= {key for context, _ in [*REFUSALS.values(), *REFUSED_BY_COOKIECUTTER.values()] for key in context}
    assert passed <= COOKIECUTTER_JSON.keys()


def test_the_combinations_use_every_choice_value():
    for key, values in COOKIECUTTER_JSON.items():
        if key.startswith("_"):
            continue
        if isinstance(values, list):
            used = {context.get(key, values[0]) for context in COMBINATIONS.values()}
            assert used == set(values), key
        if isinstance(values, bool):
            assert {context.get(key, values) for context in COMBINATIONS.values()} == {True, False}, key


def test_bakes_exactly_the_expected_files(baked):
    assert project_files(baked.project_path) == expected_files(baked.context)


def test_the_core_files_are_there(baked):
    """A check that does not lean on the template folder: these are what the READMEs promise."""
    package = baked.context["project_slug"]
    core = {"README.md", "pyproject.toml", f"src/{package}/train.py", f"src/{package}/task.py",
            *(f"src/{package}/utils/{name}.py" for name in ("repro", "data", "device")), "tests/test_two_runs_match.py"}
    if baked.context["scope"] == "research":
        core |= {f"src/{package}/config.py", f"src/{package}/engine/loop.py", f"src/{package}/verify.py"}
    else:
        core |= {"notebooks/reproducibility.ipynb"}
    files = project_files(baked.project_path)
    assert core <= files
    if baked.context["scope"] == "teaching":  # what a first lesson does not need
        assert not any(name.startswith((f"src/{package}/engine", "slurm", "docs")) for name in files)


# What differs between the two sizes by design: every other file that both have is one file for both.
DIFFERS_BY_SIZE = {"README.md", "pyproject.toml", ".github/workflows/ci.yml", "src/{package}/__init__.py",
                   "src/{package}/train.py", "src/{package}/config.py", "tests/conftest.py", "exercises/README.md",
                   "exercises/ANSWERS.md"}


def test_the_two_sizes_share_utils_task_py_and_the_shared_proofs_byte_for_byte(cookies):
    sizes = {scope: cookies.bake(extra_context={"scope": scope, "init_git": False}).project_path
             for scope in ("research", "teaching")}
    research, teaching = sizes["research"], sizes["teaching"]
    package = research.name
    both = project_files(research) & project_files(teaching)
    different = {name for name in both if (research / name).read_bytes() != (teaching / name).read_bytes()}
    by_design = {name.format(package=package) for name in DIFFERS_BY_SIZE}
    patches = {name for name in different if name.startswith("exercises/") and name.endswith("/break.patch")}
    assert different - patches == by_design
    for shared in ("utils/__init__.py", "utils/hashseed.py", "utils/repro.py", "utils/data.py", "utils/device.py",
                   "task.py"):
        assert f"src/{package}/{shared}" in both - different, shared
    assert {"tests/test_two_runs_match.py", "tests/test_repro.py"} <= both - different


def test_the_project_is_a_git_repository_exactly_when_init_git_is_true(baked):
    assert (baked.project_path / ".git").is_dir() == baked.context["init_git"]


def test_the_readme_has_the_section_the_next_steps_message_points_to(baked):
    section = post_gen.QUICK_START[baked.context["language"]]
    assert f"## {section}\n" in (baked.project_path / "README.md").read_text(encoding="utf-8")


def test_no_template_syntax_is_left(baked):
    for relative in project_files(baked.project_path) - {"docs/study.png"}:  # a picture, copied as it is
        text = (baked.project_path / relative).read_text(encoding="utf-8")
        assert "{{ cookiecutter" not in text and "{{cookiecutter" not in text and "{%" not in text, relative


def test_pyproject_parses_and_keeps_the_strings_exactly(baked):
    project = tomllib.loads((baked.project_path / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == baked.context["project_slug"]
    assert project["description"] == baked.context["description"]
    assert project["authors"][0]["name"] == baked.context["author_name"]
    assert ("email" in project["authors"][0]) == bool(baked.context["author_email"])
    assert project["requires-python"] == f">={baked.context['python_version']}"
    assert ("scikit-learn" in " ".join(project["dependencies"])) == (baked.context["dataset"] == "digits")


def test_python_compiles_and_ruff_is_clean(baked):
    for path in baked.project_path.rglob("*.py"):
        py_compile.compile(str(path), doraise=True)
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                            cwd=baked.project_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("scope", ["research", "teaching"])
def test_the_longest_package_name_the_hook_takes_bakes_lint_clean(scope, tmp_path):
    """Every line that names the package still fits ruff's 120 columns with a name of PACKAGE_MAX
    characters (exercises and their patches included); one character more is refused by the hook."""
    slug = "protein_folding_experiments_2026"
    assert len(slug) == pre_gen.PACKAGE_MAX and pre_gen.check_slug(slug) is None
    result = cookiecutter_cli(tmp_path, f"project_slug={slug}", f"scope={scope}", "init_git=no", "exercises=yes")
    assert result.returncode == 0, result.stderr
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=tmp_path / slug, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_no_function_of_the_generated_package_is_longer_than_60_lines(baked):
    """Short functions a student reads top to bottom; ruff's C901/PLR0912/PLR0915 guard the rest."""
    import ast

    lengths = {}
    for path in (baked.project_path / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert lengths and max(lengths.values()) <= 60, sorted(lengths.items(), key=lambda item: item[1])[-3:]
    pyproject = tomllib.loads((baked.project_path / "pyproject.toml").read_text(encoding="utf-8"))
    assert {"C901", "PLR0912", "PLR0915"} <= set(pyproject["tool"]["ruff"]["lint"]["select"])
    assert "per-file-ignores" not in pyproject["tool"]["ruff"]["lint"]  # no lint exception, E402 included


def test_the_workflow_keeps_its_expressions_and_is_valid_yaml(baked):
    workflow = baked.project_path / ".github" / "workflows" / "ci.yml"
    if not baked.context["github_actions"]:
        assert not workflow.exists()
        return
    text = workflow.read_text(encoding="utf-8")
    assert "${{ matrix.python-version }}" in text
    matrix = yaml.safe_load(text)["jobs"]["test"]["strategy"]["matrix"]["python-version"]
    assert matrix[0] == baked.context["python_version"]


@pytest.mark.parametrize("schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"])
def test_the_workflow_validates_against_the_github_workflow_schema(baked, schema):
    """check-jsonschema's vendored schemas: no network. The second requires timeout-minutes on each job."""
    workflow = baked.project_path / ".github" / "workflows" / "ci.yml"
    if not baked.context["github_actions"]:
        pytest.skip("github_actions is false: no workflow")
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(workflow)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_workflow_installs_the_cpu_torch_wheel_before_the_project_and_runs_both_test_selections(baked):
    if not baked.context["github_actions"]:
        pytest.skip("github_actions is false: no workflow")
    workflow = yaml.safe_load((baked.project_path / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))
    steps = workflow["jobs"]["test"]["steps"]
    if baked.context["scope"] == "teaching":  # one path: the CPU wheel, the project, lint, the tests
        runs = [step["run"].split("#")[0].strip() for step in steps if "run" in step]
        assert runs == ["python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
                        'python -m pip install -e ".[dev]"', "ruff check .", "pytest"], runs
        return
    # Two paths: a committed requirements.lock (its hash-checked stack, then the project alone), or none.
    for lock_committed in ("!=", "=="):
        runs = [step["run"].split("#")[0].strip() for step in steps
                if "run" in step and lock_committed in step.get("if", lock_committed)]
        cpu_torch = next(i for i, run in enumerate(runs) if "whl/cpu" in run)
        project = next(i for i, run in enumerate(runs) if "install" in run and " -e " in run)
        assert cpu_torch < project, runs
        assert "pytest" in runs and "pytest -m distributed" in runs
        locked = [run for run in runs if "-r requirements.lock" in run]
        assert bool(locked and "--require-hashes" in locked[0] and "--no-deps -e ." in runs[project]) \
            == (lock_committed == "!="), runs


def test_the_pre_commit_ruff_is_the_dev_extras_ruff(baked):
    """Two ruff versions disagree on what is clean: a commit hook would fail code that CI passes."""
    config = baked.project_path / ".pre-commit-config.yaml"
    if not baked.context["pre_commit"]:
        pytest.skip("pre_commit is false: no pre-commit config")
    [hook_repo] = [repo for repo in yaml.safe_load(config.read_text(encoding="utf-8"))["repos"]
                   if repo["repo"].endswith("/ruff-pre-commit")]
    dev = tomllib.loads((baked.project_path / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]["dev"]
    [ruff] = [requirement for requirement in dev if requirement.replace(" ", "").startswith("ruff")]
    assert ruff.replace(" ", "") == f"ruff=={hook_repo['rev'].removeprefix('v')}"


def test_the_license_names_the_author(baked):
    license_file = baked.project_path / "LICENSE"
    if baked.context["license"] == "none":
        assert not license_file.exists()
        return
    text = license_file.read_text(encoding="utf-8")
    assert baked.context["author_name"] in text
    assert {"MIT": "MIT License", "BSD-3-Clause": "BSD 3-Clause", "Apache-2.0": "Apache License"}[
        baked.context["license"]] in text


def bake_with_every_readme_route(folder: Path, name: str) -> Path:
    """The combination `name` baked, then changed by every route of its README (test_routes.py,
    which waits on this suite): the research size's "Changing the settings", the teaching size's
    "Bring your own task". The routes ride on a suite that runs anyway, since they change what its
    task reads and its defaults, not what its options chose."""
    from test_routes import take_every_route, take_every_teaching_route  # that module reads SUITES from this one

    project = bake(folder, COMBINATIONS[name])
    return take_every_teaching_route(project) if COMBINATIONS[name].get("scope") == "teaching" \
        else take_every_route(project)


def bake_with_task(folder: Path, name: str, task: str) -> Path:
    """The combination `name` baked, with the README's task `task` (test_tasks.py) as its task.py."""
    tasks = load("tasks_benchmark", ROOT / "benchmarks" / "tasks.py")
    project = bake(folder, COMBINATIONS[name])
    tasks.put_task(project, tasks.readme_tasks()[task])
    return project


# The generated suites, run in the background from the session's start (conftest.background_suites).
# The digits combination's plain suite is also that of the README's routes (ROUTED), and the
# teaching digits combination's that of the teaching README's (TEACHING_ROUTED).
ROUTED, TEACHING_ROUTED = "digits_warn_bsd_no_actions", "teaching_digits_zh_warn_apache"
# A research suite takes minutes of CI: the awkward combination's runs with the README's regression
# as task.py, and test_tasks.py waits on it for that task rather than running one more. The two are
# independent axes (the options change the names, the language, the seed and the determinism
# default; task.py the data, the model, the loss and the metrics), so one suite proves both, and
# the regression imports from its own package relatively, whatever the package is named.
TASK_OF = {"awkward_names_off_no_license": "regression"}
# The bakes whose whole suite runs (conftest.SAME_IN_EVERY_BAKE: what the others leave out).
DEFAULT_BAKES = ("defaults", "teaching")
SUITES = {
    "defaults -m slow": Suite(lambda folder: bake(folder, COMBINATIONS["defaults"]), ("-m", "slow"), minutes=8),
    **{f"{name} -m distributed": Suite(lambda folder, name=name: bake(folder, COMBINATIONS[name]),
                                       ("-m", "distributed", *NOT_SAME_IN_EVERY_TIER), minutes=5)
       for name in DISTRIBUTED_COMBINATIONS},
    **{name: Suite(lambda folder, name=name: (bake_with_task(folder, name, TASK_OF[name]) if name in TASK_OF
                                              else bake(folder, COMBINATIONS[name])),
                   () if name in DEFAULT_BAKES else OTHER_BAKES,
                   minutes=1 if COMBINATIONS[name].get("scope") == "teaching" else 4)
       for name in COMBINATIONS},
    ROUTED: Suite(lambda folder: bake_with_every_readme_route(folder, ROUTED), OTHER_BAKES, minutes=4),
    TEACHING_ROUTED: Suite(lambda folder: bake_with_every_readme_route(folder, TEACHING_ROUTED),
                           OTHER_BAKES, minutes=1),
}


@pytest.mark.slow
@pytest.mark.parametrize("combination", [pytest.param(name, marks=pytest.mark.suite(name)) for name in COMBINATIONS])
def test_the_generated_test_suite_passes(combination, background_suites):
    """The plain suite of each combination (ROUTED's and TEACHING_ROUTED's with the README's routes
    taken, TASK_OF's with its task): the whole of it for DEFAULT_BAKES, the others less
    conftest.SAME_IN_EVERY_BAKE."""
    background_suites[combination].result()


@pytest.mark.slow
@pytest.mark.parametrize("combination", [pytest.param(name, marks=pytest.mark.suite(name)) for name in DEFAULT_BAKES])
def test_what_the_other_suites_leave_out_ran_and_passed_in_the_default_bakes(combination, background_suites):
    """Each entry of SAME_IN_EVERY_BAKE names tests that the default bake of its size has, and they
    passed there (a renamed test would otherwise be left out everywhere, unseen)."""
    report = background_suites[combination].result().report
    passed, other = outcomes(report)
    files = {path.split("::")[0] for path in passed | other}  # a teaching bake has fewer
    theirs = tuple(entry for entry in SAME_IN_EVERY_BAKE if entry.split("::")[0] in files or combination == "defaults")
    assert ran_and_passed(report, theirs) == [], combination


# What a test of a default bake may skip for: what the machine lacks (a GPU, an optional extra,
# Linux's /proc and signals, a CPU's instruction set or kernels). The routes of a README take
# flags and parts of the example out, and the tests about them then skip, saying that the project
# lacks them; in a default bake, which has them all, such a skip is a test that no longer runs
# where it should (a flag renamed by mistake: the edges test would skip it unseen).
MACHINE_REASONS = re.compile(r"CUDA|GPU|is not installed|Linux|/proc|CPU|is not available on")


def skips(report: Path) -> dict[str, str]:
    """Each skipped test of a JUnit report -> the reason it gave."""
    return {f"{case.get('classname')}::{case.get('name')}": skipped.get("message", "")
            for case in ElementTree.parse(report).iter("testcase") for skipped in case.iter("skipped")}


def test_skips_for_what_the_project_lacks_are_told_apart_from_the_machines():
    """The control of the test below: the reasons the generated tests give, seen each way."""
    assert not MACHINE_REASONS.search("this project's train.py has no --dropout")
    assert not MACHINE_REASONS.search("about the example's data, which this project replaced or took out")
    assert not MACHINE_REASONS.search("this project's model has no dropout")
    assert MACHINE_REASONS.search("needs a CUDA GPU: runs on GPU machines only")
    assert MACHINE_REASONS.search("wandb is not installed: an optional extra (pip install -e '.[wandb]')")
    assert MACHINE_REASONS.search("--precision bf16 is not available on cpu (no kernel); try --precision fp32")


@pytest.mark.slow
@pytest.mark.parametrize("combination", [pytest.param(name, marks=pytest.mark.suite(name)) for name in DEFAULT_BAKES])
def test_a_default_bake_skips_a_test_only_for_what_the_machine_lacks(combination, background_suites):
    """Every test of a default bake runs here unless this machine lacks what it needs."""
    found = skips(background_suites[combination].result().report)
    assert {test: reason for test, reason in found.items() if not MACHINE_REASONS.search(reason)} == {}


def test_what_the_digits_tier_leaves_out_names_torchrun_tests_of_the_template():
    """Each entry of SAME_IN_EVERY_TIER is a test file of the template, or a test defined there and
    marked distributed (a typo would deselect nothing, and the GPT tier's check would catch it only
    after minutes)."""
    for entry in SAME_IN_EVERY_TIER:
        path, _, test = entry.partition("::")
        source = (TEMPLATE_DIR / path).read_text(encoding="utf-8")
        whole_file = "pytestmark = pytest.mark.distributed" in source
        if test:
            marked = re.search(rf"@pytest\.mark\.distributed\n(@[^\n]+\n)*def {test}\(", source)
            assert marked or (whole_file and f"def {test}(" in source), entry
        else:
            assert whole_file, entry  # a file of plain tests would leave the plain tier's, not this one's


def test_ran_and_passed_names_each_test_that_a_report_lacks_or_that_did_not_pass(tmp_path):
    """The check the default bakes' and the GPT tier's suites go through, on a report made here."""
    report = tmp_path / "report.xml"
    report.write_text('<testsuites><testsuite>'
                      '<testcase classname="tests.test_a" name="test_one[0]"/>'
                      '<testcase classname="tests.test_a" name="test_one[1]"/>'
                      '<testcase classname="tests.test_b" name="test_two"><skipped message="no GPU"/></testcase>'
                      '<testcase classname="tests.test_b" name="test_three"><failure message="x"/></testcase>'
                      '</testsuite></testsuites>', encoding="utf-8")
    assert ran_and_passed(report, ("tests/test_a.py", "tests/test_a.py::test_one")) == []
    assert ran_and_passed(report, ("tests/test_b.py::test_two", "tests/test_b.py::test_three",
                                   "tests/test_a.py::test_renamed", "tests/test_c.py")) == [
        "tests/test_b.py::test_two", "tests/test_b.py::test_three", "tests/test_a.py::test_renamed", "tests/test_c.py"]


@pytest.mark.slow
@pytest.mark.parametrize("combination", [pytest.param(name, marks=pytest.mark.suite(f"{name} -m distributed"))
                                         for name in DISTRIBUTED_COMBINATIONS])
def test_the_generated_torchrun_tier_passes(combination, background_suites):
    """`pytest -m distributed` (two minutes and more) for the combinations whose options reach what
    it trains (DISTRIBUTED_COMBINATIONS). The others differ from these in names, licence, language
    and files, which their plain suites and the checks above cover."""
    background_suites[f"{combination} -m distributed"].result()


@pytest.mark.slow
@pytest.mark.suite("defaults -m slow")
def test_the_generated_slow_tests_pass(background_suites):
    """Mixed precision and torch.compile (minutes of compiling): for the defaults only, since no
    option changes that code."""
    background_suites["defaults -m slow"].result()


def fresh_venv(folder: Path) -> str:
    """A venv that sees this interpreter's packages (torch among them) through a .pth file, so that
    nothing is downloaded; its python."""
    venv.create(folder, with_pip=True)
    python = str(folder / "bin" / "python")
    site_packages = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    Path(site_packages, "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


@pytest.mark.parametrize("combination", ["defaults", "awkward_names_off_no_license"])
def test_pip_install_editable_works_and_the_module_runs(combination, cookies, tmp_path):
    project = cookies.bake(extra_context=COMBINATIONS[combination]).project_path
    python = fresh_venv(tmp_path / "venv")  # the project itself is installed the way a user installs it
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "-e",
                              str(project)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    package = project.name
    run = subprocess.run([python, "-m", f"{package}.train", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and "--deterministic" in run.stdout, run.stderr


def test_a_regular_install_ships_the_packages_data_files(cookies, tmp_path):
    """src/<package>/data/ (the GPT task's text) goes into the wheel: a task finds it next to
    task.py in site-packages too, not only in a checkout."""
    project = cookies.bake(extra_context=COMBINATIONS["defaults"]).project_path
    python = fresh_venv(tmp_path / "venv")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(project)], capture_output=True,
                             text=True)
    assert install.returncode == 0, install.stderr
    found = subprocess.run([python, "-c", f"import pathlib, {project.name} as p; "
                            "print((pathlib.Path(p.__file__).parent / 'data' / 'corpus.txt').read_text()[:9])"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert found.stdout.strip() == "On Repeat", found.stderr
