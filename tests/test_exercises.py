"""The generated project's break-it exercises, checked as the template's mutation test.

For each `exercises/NN-name/` of a freshly baked project, of either size: its `break.patch` applies;
with it applied, the test that its README names on the `Caught by:` line fails (unless the README
says `Caught on: GPU only`); `git apply -R` gives back the committed tree, on which that test
passes. An exercise has one README for both sizes (and one test that catches it in both); its
patch is one file, or one per size where the code it breaks differs by size. And the README's
proof matrix names only tests and exercises that exist.

Speed: that each named test passes on the project as generated is read from the JUnit report of
that project's whole suite, which test_bake.py runs in the background anyway (same options, so the
same files); each patch then gets one pytest run of its named test alone. A revert that gives back
the committed tree byte for byte leaves that project, so the test passes again without a run.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest
from conftest import COOKIECUTTER_JSON, ROOT, TEMPLATE_DIR, breaks, load, post_gen
from test_bake import COMBINATIONS
from test_bake import SUITES as BAKE_SUITES

EXERCISES_DIR = TEMPLATE_DIR / "exercises"
EXERCISES = sorted(path.name for path in EXERCISES_DIR.iterdir() if path.is_dir())
TEST_ID = r"tests/test_\w+\.py::test_\w+"
CAUGHT_BY = re.compile(rf"^Caught by: ({TEST_ID})$", re.MULTILINE)
GPU_ONLY = "Caught on: GPU only"
SLUG = "{{ cookiecutter.project_slug }}"
# Options whose values show up in the generated files: a patch must apply whatever they are.
OTHER_OPTIONS = {"project_name": "Other Name", "dataset": "digits", "determinism": "off", "seed": "0",
                 "license": "none", "python_version": "3.11", "init_git": False, "exercises": True, "language": "zh"}
PYTEST = ("-q", "-p", "no:cacheprovider")  # `python -m pytest` with these, run by breaks.run_pytest
# Each README exists once per language; a project gets the one of its language as README.md.
EN, ZH = (f"{{% if cookiecutter.language == '{language}' %}}README.md{{% endif %}}" for language in ("en", "zh"))


# The teacher's page, one per language: a section per exercise, with the failing test and its message.
ANSWERS = {language: EXERCISES_DIR / f"{{% if cookiecutter.language == '{language}' %}}ANSWERS.md{{% endif %}}"
           for language in ("en", "zh")}
FAILS = {"en": "Fails: ", "zh": "会失败："}
PRINTS = {"en": "It prints: ", "zh": "打印："}


def answers(language: str) -> dict[str, dict[str, str]]:
    """Exercise number -> its section of the answers page: the test on its Fails line and the
    message quoted on its It prints line (none for a GPU-only exercise)."""
    found = {}
    for section in re.split(r"^## ", ANSWERS[language].read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        number = section[:2]
        if number.isdigit():
            lines = section.splitlines()
            quoted = {label: line[len(prefix):].strip("`") for line in lines
                      for label, prefix in (("fails", FAILS[language]), ("prints", PRINTS[language]))
                      if line.startswith(prefix)}
            found[number] = quoted
    return found


def readme(exercise: str, name: str = EN) -> str:
    return (EXERCISES_DIR / exercise / name).read_text(encoding="utf-8")


def caught_by(exercise: str) -> str:
    """The test id on the README's `Caught by:` line (exactly one such line)."""
    [test_id] = CAUGHT_BY.findall(readme(exercise))
    return test_id


def gpu_only(exercise: str) -> bool:
    return GPU_ONLY in readme(exercise).splitlines()


def git(path: Path, *args: str) -> subprocess.CompletedProcess:
    """git in `path`, blind to GIT_* variables of the caller (a hook's GIT_DIR would redirect it)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=path, env=env, capture_output=True, text=True)


def make_committed_repository(path: Path) -> None:
    """The post-generation hook makes the project a repository, and commits when git knows who
    commits; here it must be one with everything committed, whatever the machine's git settings."""
    top = git(path, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != path.resolve():
        assert git(path, "init", "-q").returncode == 0
    assert git(path, "add", "-A").returncode == 0
    if git(path, "rev-parse", "--verify", "-q", "HEAD").returncode != 0 or git(path, "status", "--porcelain").stdout:
        commit = git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--no-verify", "-m", "baked")
        assert commit.returncode == 0, commit.stderr


def unchanged(path: Path) -> bool:
    """Whether the tracked files are exactly the committed ones."""
    return git(path, "diff", "--quiet", "HEAD").returncode == 0


def run_tests(path: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m pytest -q ARGS` in the project `path`, forked from its fork server (breaks.run_pytest)."""
    return breaks.run_pytest(path, [*PYTEST, *args], timeout=1800)


def outcomes(junit_xml: Path) -> dict[str, set[str]]:
    """test id (parameters dropped) -> the outcomes of its cases, from pytest's JUnit XML report."""
    found: dict[str, set[str]] = {}
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        module = case.get("classname").replace(".", "/")
        test_id = f"{module}.py::{case.get('name').split('[')[0]}"
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        found.setdefault(test_id, set()).add(outcome)
    return found


def defined_tests(project: Path) -> set[str]:
    """Every test function the generated project defines, as tests/FILE.py::NAME."""
    names = set()
    for path in (project / "tests").glob("test_*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(f"tests/{path.name}::{node.name}")
    return names


DESCRIBED = breaks.load("exercises")
SIZES = {exercise: breaks.sizes_of(exercise, DESCRIBED) for exercise in EXERCISES}
IN_EACH_SIZE = [(scope, exercise) for exercise in EXERCISES for scope in SIZES[exercise]]


def patch_files(exercise: str) -> list[str]:
    """The template files of the exercise's patch: break.patch, or one per size."""
    return sorted({breaks.patch_file(brk, DESCRIBED) for brk in DESCRIBED if brk.name == exercise})


@pytest.fixture(scope="module")
def projects(cookies_session) -> dict[str, Path]:
    baked = {}
    for scope in breaks.SCOPES:
        result = cookies_session.bake(extra_context={"exercises": True, "language": "en", "scope": scope},
                                      template=str(ROOT))
        assert result.exit_code == 0, result.exception
        make_committed_repository(result.project_path)
        baked[scope] = result.project_path
    return baked


def test_a_break_changes_its_text_inside_its_function_alone_and_module_means_the_whole_file():
    """The same line inside and outside a function: a break of the function changes its own; one of
    `<module>` finds the line twice and refuses (its text must be there once), as it finds the
    top-level `if` once; a function that is not there is a LookupError, not a silent no-op."""
    source = "LIMIT = 1\n\ndef bound():\n    LIMIT = 1\n    return LIMIT\n\nif LIMIT:\n    pass\n"

    def change(function: str, replace: str, with_: str) -> str:
        return breaks.broken(source, breaks.Break("b", "x.py", function, replace, with_, ""))

    assert change("bound", "    LIMIT = 1\n", "    LIMIT = 2\n") == source.replace("    LIMIT = 1", "    LIMIT = 2")
    assert change("<module>", "if LIMIT:\n", "if not LIMIT:\n") == source.replace("if LIMIT:", "if not LIMIT:")
    for function, replace in (("<module>", "LIMIT = 1\n"), ("bound", "if LIMIT:\n"), ("elsewhere", "pass\n")):
        with pytest.raises(LookupError):
            change(function, replace, "")


def test_there_are_exercises_and_each_has_two_readmes_one_caught_by_line_and_a_patch():
    assert len(EXERCISES) >= 12
    for exercise in EXERCISES:
        assert re.fullmatch(r"\d\d-[a-z0-9-]+", exercise), exercise
        chinese = readme(exercise, ZH)
        # cookiecutter copies a file it takes for binary without rendering it, and binaryornot takes a
        # UTF-8 file whose first 512 bytes end inside a Chinese character for binary: no template here.
        assert "{{" not in chinese and "{%" not in chinese, f"{exercise}/README.zh.md"
        assert CAUGHT_BY.findall(chinese) == [caught_by(exercise)], f"{exercise}: the Caught by lines differ"
        assert (GPU_ONLY in chinese.splitlines()) == gpu_only(exercise), f"{exercise}: the GPU-only lines differ"
        assert all((EXERCISES_DIR / exercise / name).is_file() for name in patch_files(exercise)), exercise
        for index in (EN, ZH):
            assert f"]({exercise}/)" in (EXERCISES_DIR / index).read_text(encoding="utf-8"), (index, exercise)


def test_the_answers_page_quotes_for_each_exercise_its_test_and_message_alike_in_both_languages():
    """exercises/ANSWERS.md (en, zh): one section per exercise naming the test of its Caught by
    line and quoting the message that test prints with the patch applied (the slow test below
    checks the message); the two languages quote the same; a GPU-only exercise quotes none."""
    english, chinese = answers("en"), answers("zh")
    assert sorted(english) == sorted(exercise[:2] for exercise in EXERCISES) == sorted(chinese)
    for exercise in EXERCISES:
        section = english[exercise[:2]]
        assert section == chinese[exercise[:2]], exercise
        if gpu_only(exercise):
            assert not section, f"{exercise}: a CPU cannot show a GPU-only exercise's message"
        else:
            assert section["fails"] == caught_by(exercise) and section["prints"].strip(), exercise


def test_each_exercise_is_described_in_breaks_exercises_toml_once_or_once_per_size_with_its_readmes_test():
    assert sorted({brk.name for brk in DESCRIBED}) == EXERCISES
    for exercise in EXERCISES:
        entries = [brk for brk in DESCRIBED if brk.name == exercise]
        scopes = sorted(str(brk.scope) for brk in entries)
        assert scopes in (["None"], ["research"], ["research", "teaching"]), (exercise, scopes)
        for brk in entries:  # one README for both sizes: the same test catches it in both
            assert brk.caught_by == caught_by(exercise) and brk.gpu_only == gpu_only(exercise), exercise
    assert [exercise for exercise in EXERCISES if "teaching" in SIZES[exercise]], "no exercise for teaching"


def test_the_exercises_a_teaching_project_lacks_are_pruned_from_it_and_no_other():
    research_only = {exercise for exercise in EXERCISES if SIZES[exercise] == ["research"]}
    pruned = {path.split("/")[1] for path in post_gen.RESEARCH_ONLY if path.startswith("exercises/")}
    assert pruned == research_only


def test_the_committed_patches_are_the_ones_that_breaks_exercises_toml_gives_for_the_current_code(capsys):
    """Rebuilt against a fresh bake of the working tree: a change to the code that a patch no longer
    fits fails here, naming it; `python scripts/breaks.py patches` rewrites them."""
    assert breaks.patches(check=True) == 0, capsys.readouterr().err


@pytest.mark.parametrize("exercise, name", [(exercise, name) for exercise in EXERCISES
                                            for name in patch_files(exercise)])
def test_a_patch_is_plain_text_but_the_package_name(exercise, name):
    """A patch renders for any package name, and holds no other template syntax."""
    text = (EXERCISES_DIR / exercise / name).read_text(encoding="utf-8")
    rest = text.replace(SLUG, "")
    for syntax in ("{{", "{%", "{#", "my_project"):
        assert syntax not in rest, f"{exercise}/break.patch holds {syntax!r} outside {SLUG}"
    files = re.findall(r"^diff --git a/(\S+) b/(\S+)$", text.replace(SLUG, "PKG"), re.MULTILINE)
    assert files and all(a == b and a.startswith("src/PKG/") for a, b in files), files


@pytest.mark.parametrize("scope", breaks.SCOPES)
def test_the_baked_exercises_are_the_sizes_and_hold_no_template_syntax_and_patch_the_packages_files(scope, projects):
    project = projects[scope]
    assert sorted(path.name for path in (project / "exercises").iterdir() if path.is_dir()) == [
        exercise for exercise in EXERCISES if scope in SIZES[exercise]]
    for path in (project / "exercises").rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert "{{" not in text and "{%" not in text, path
    for exercise in EXERCISES:
        if scope in SIZES[exercise]:
            assert sorted(path.name for path in (project / "exercises" / exercise).iterdir()) == ["README.md",
                                                                                                 "break.patch"]
            text = (project / "exercises" / exercise / "break.patch").read_text(encoding="utf-8")
            assert f"--- a/src/{project.name}/" in text, exercise
    page = (project / "exercises" / "ANSWERS.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (\d\d) ", page, re.MULTILINE) == [exercise[:2] for exercise in EXERCISES
                                                                if scope in SIZES[exercise]]


@pytest.mark.parametrize("scope", breaks.SCOPES)
def test_the_chinese_answers_page_is_rendered_for_the_size(scope, cookies_session):
    """cookiecutter copies a file that binaryornot takes for binary without rendering it: the
    Chinese page must come out rendered, with the sections of the size's exercises."""
    result = cookies_session.bake(extra_context={"language": "zh", "scope": scope}, template=str(ROOT))
    assert result.exit_code == 0, result.exception
    page = (result.project_path / "exercises" / "ANSWERS.md").read_text(encoding="utf-8")
    assert "{%" not in page and "{{" not in page
    assert re.findall(r"^## (\d\d) ", page, re.MULTILINE) == [exercise[:2] for exercise in EXERCISES
                                                                if scope in SIZES[exercise]]


@pytest.mark.parametrize("scope", breaks.SCOPES)
def test_every_patch_applies_to_a_project_baked_with_other_options(scope, cookies_session):
    result = cookies_session.bake(extra_context={**OTHER_OPTIONS, "scope": scope}, template=str(ROOT))
    assert result.exit_code == 0, result.exception
    other = result.project_path
    assert other.name == "other_name"
    git(other, "init", "-q")  # so that git apply reads paths from here, whatever folder holds it
    for exercise in EXERCISES:
        if scope in SIZES[exercise]:
            check = git(other, "apply", "--check", f"exercises/{exercise}/break.patch")
            assert check.returncode == 0, f"{exercise}: {check.stderr}"


def test_the_readmes_commands_apply_and_undo_a_patch_in_a_project_inside_a_course_repository(projects, tmp_path):
    """As a teacher hands it out: the project is one folder of a larger repository. The commands of
    exercises/README.md, run in bash from the project's folder (all but pytest), must change the
    file the patch names, and undo it. The control: a plain `git apply` there exits 0 and changes
    nothing, which is why the README's commands carry --directory."""
    import shutil

    course = tmp_path / "course"
    project = shutil.copytree(projects["teaching"], course / "week-3" / "my_project",
                              ignore=shutil.ignore_patterns(".git"))
    make_committed_repository(course)
    block = (project / "exercises" / "README.md").read_text(encoding="utf-8").split("```bash\n")[1].split("```")[0]
    commands = [line.split("  #")[0].strip() for line in block.splitlines()]
    apply_lines, undo = [c for c in commands if c != "pytest"][:-1], commands[-1]
    assert undo.startswith("git apply") and " -R " in undo, commands
    patch = "exercises/01-seed-only-torch/break.patch"
    plain = subprocess.run(["git", "apply", patch], cwd=project, capture_output=True, text=True)
    assert plain.returncode == 0 and unchanged(course), "the trap the README guards against is gone"
    done = subprocess.run(["bash", "-ec", "\n".join(apply_lines)], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0 and not unchanged(course), done.stderr
    changed = git(course, "diff", "--name-only").stdout.split()
    assert changed == [f"week-3/my_project/src/{project.name}/utils/repro.py"], changed
    undone = subprocess.run(["bash", "-ec", "\n".join([apply_lines[0], undo])], cwd=project, capture_output=True,
                            text=True)
    assert undone.returncode == 0 and unchanged(course), undone.stderr


@pytest.mark.parametrize("scope", breaks.SCOPES)
def test_every_test_and_exercise_the_proof_matrix_names_exists(scope, projects):
    project = projects[scope]
    text = (project / "README.md").read_text(encoding="utf-8")
    assert text.count("\n## Proof matrix\n") == 1
    section = text.split("\n## Proof matrix\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|") and not set(line) <= set("|- ")]
    rows = table[1:]  # without the header
    assert len(rows) >= (18 if scope == "research" else 8), table
    defined, named_exercises = defined_tests(project), set()
    for row in rows:
        tests = re.findall(TEST_ID, row)
        assert tests, f"a row names no test: {row}"
        missing = [test for test in tests if test not in defined]
        assert not missing, f"the proof matrix names tests that do not exist: {missing}"
        named_exercises.update(re.findall(r"\(exercises/(\d\d-[a-z0-9-]+)/\)", row))
    in_this_size = {exercise for exercise in EXERCISES if scope in SIZES[exercise]}
    assert named_exercises == in_this_size, named_exercises ^ in_this_size
    assert all((project / "exercises" / name / "break.patch").is_file() for name in named_exercises)
    missing = [caught_by(exercise) for exercise in in_this_size if caught_by(exercise) not in defined]
    assert not missing, f"exercises name tests that do not exist: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("scope, exercise", IN_EACH_SIZE,
                         ids=[f"{scope}:{exercise}" for scope, exercise in IN_EACH_SIZE])
def test_a_break_patch_makes_its_named_test_fail_and_comes_off_again(scope, exercise, projects):
    project = projects[scope]
    named, patch = caught_by(exercise), f"exercises/{exercise}/break.patch"
    assert unchanged(project), "an earlier exercise left the project changed"
    check = git(project, "apply", "--check", patch)
    assert check.returncode == 0, check.stderr
    assert git(project, "apply", patch).returncode == 0
    broken = None
    try:
        assert not unchanged(project), "the patch changed nothing"
        if not gpu_only(exercise):
            broken = run_tests(project, named)
    finally:
        revert = git(project, "apply", "-R", patch)
    assert revert.returncode == 0 and unchanged(project), f"git apply -R did not give back the tree: {revert.stderr}"
    if broken is not None:
        assert broken.returncode == 1 and re.search(r"\d+ (failed|errors?)\b", broken.stdout), (
            f"{named} did not fail with {patch} applied (exit status {broken.returncode}):\n{broken.stdout[-3000:]}")
        printed = answers("en")[exercise[:2]]["prints"]  # what exercises/ANSWERS.md tells the teacher
        assert any(printed in line for line in broken.stdout.splitlines() if line.startswith("E ")), (
            f"ANSWERS.md quotes {printed!r} for {exercise}, which {named} did not print:\n{broken.stdout[-3000:]}")
    # That the named test passes on the tree as committed: the next test, from the whole suite's run.
    if broken is None:
        pytest.skip(f"{exercise}: the patch applies and comes off cleanly, but {named} is not run with it: its "
                    f"README says '{GPU_ONLY}' (what it breaks, a CPU does not run)")


# Each size's exercises are baked (the projects fixture) as test_bake.py's combination of that name
# bakes, whose whole suite runs in the background anyway: its report says how each named test did on
# the project as generated, without running them a second time.
AS_GENERATED = {"research": "defaults", "teaching": "teaching"}
SUITES = {name: BAKE_SUITES[name] for name in AS_GENERATED.values()}


@pytest.mark.slow
@pytest.mark.parametrize("scope", [pytest.param(scope, marks=pytest.mark.suite(AS_GENERATED[scope]))
                                   for scope in breaks.SCOPES])
def test_each_exercises_named_test_passes_on_the_project_as_generated(scope, background_suites):
    defaults = {key: value[0] if isinstance(value, list) else value for key, value in COOKIECUTTER_JSON.items()}
    context = {**defaults, **COMBINATIONS[AS_GENERATED[scope]]}
    assert (context["exercises"], context["language"], context["scope"]) == (True, "en", scope), (
        "the combination is no longer the project the exercises are baked as")
    found = outcomes(background_suites[AS_GENERATED[scope]].result().report)
    for exercise in EXERCISES:
        if scope in SIZES[exercise]:  # skipped: GPU-only, no GPU here
            named, allowed = caught_by(exercise), {"passed", "skipped"} if gpu_only(exercise) else {"passed"}
            assert found.get(named) and found[named] <= allowed, f"{exercise}: {named} gave {found.get(named)}"


def test_the_readme_quotes_the_committed_kill_ratio_of_the_mutation_suite_as_it_is():
    """breaks/kill-ratio.json holds a result for each break of breaks/mutations.toml, in its order
    (a new break needs `python scripts/breaks.py kill-ratio --only NAME`), and the template README
    quotes its ratios and date."""
    record = json.loads((ROOT / "breaks" / "kill-ratio.json").read_text(encoding="utf-8"))
    assert list(record["caught"]) == [brk.name for brk in breaks.load("mutations")]
    caught = list(record["caught"].values())
    assert record["plain"] == f"{caught.count('plain')}/{len(caught)}"
    assert record["all_tiers"] == f"{sum(tier is not None for tier in caught)}/{len(caught)}"
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### The mutation suite")[1].split("\n## ")[0]
    text = " ".join(section.split())
    plain, total = record["plain"].split("/")
    assert f"**{plain} of {total}** caught by plain `pytest`" in text
    assert f"**{record['all_tiers'].split('/')[0]} of {total}** by all tiers" in text
    assert f"run on {record['date']}" in text


mutate = load("mutate", ROOT / "scripts" / "mutate.py")


def test_the_mutation_tools_record_is_of_modules_the_project_still_has_each_survivor_written_down():
    """breaks/mutmut.json (`python scripts/mutate.py`) covers modules of scripts/mutate.py's list,
    each still a module of the generated package, with counts that add up; every mutant it says
    survived has its verdict in breaks/mutants.toml (equivalent, with why; a test added since, named;
    or open, with what a test would need), its own or its function's; and the template README
    quotes the record's score and dates."""
    record = json.loads((ROOT / "breaks" / "mutmut.json").read_text(encoding="utf-8"))
    package = TEMPLATE_DIR / "src" / "{{cookiecutter.project_slug}}"
    assert record["modules"] and set(record["modules"]) <= set(mutate.MODULES)
    for module, result in record["modules"].items():
        # mutate.py runs in a research bake; a module whose content differs by size (config.py) has one
        # template file per size, named with a condition, as conftest.readme_template's README.md has.
        of_research = package / f"{{% if cookiecutter.scope == 'research' %}}{module}{{% endif %}}"
        assert (package / module).is_file() or of_research.is_file(), \
            f"{module} is no longer in the project: run python scripts/mutate.py"
        counts = {status: n for status, n in result.items() if status not in ("date", "minutes", "mutants", "against")}
        assert sum(counts.values()) == result["mutants"] > 0
        # Where it ran: a module only the project has, in a bake; one of the core, against the core's
        # own tests (mutate.against), or in a bake where its record is older than the core's package
        # (the README's table says which, per row).
        assert result["against"] in {mutate.against(module), "bake"}, module
    assert set(record["survivors"].values()) <= set(record["modules"])
    for name, module in record["survivors"].items():  # named by the package mutmut ran in
        ran_in = "repro_core" if record["modules"][module]["against"] == "core" else "my_project"
        assert name.startswith(f"{ran_in}.{module.removesuffix('.py').replace('/', '.')}."), name
    written = tomllib.loads((ROOT / "breaks" / "mutants.toml").read_text(encoding="utf-8"))
    verdicts, by_function = written["mutant"], written.get("function", {})
    unexplained = sorted(name for name in record["survivors"]
                         if name not in verdicts and name.rsplit("__mutmut_", 1)[0] not in by_function)
    assert not unexplained, f"survivors with no verdict in breaks/mutants.toml: {unexplained}"
    for name, verdict in [*verdicts.items(), *by_function.items()]:
        assert verdict["verdict"] in ("equivalent", "test added", "open"), name
        assert verdict["why"].strip(), name
    functions = {name.rsplit("__mutmut_", 1)[0] for name in record["survivors"]}
    assert not set(by_function) - functions, "a function's verdict for a function with no survivor left"
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### The mutation tool")[1].split("\n## ")[0]
    text = " ".join(section.split())
    killed, total = record["killed"].split("/")
    assert f"**{killed} of {total}** mutants killed" in text
    for module, result in record["modules"].items():
        assert f"`{module}`" in text and result["date"] in text, module
        row = f"| `{module}` | {result['against']} | {result['mutants']} | {result.get('killed', 0)} |"
        assert row in section, f"the README's table has no row {row}"


def test_the_mutation_tool_leaves_out_the_tests_that_start_a_process_and_keeps_their_stand_ins():
    """scripts/mutate.py's scratch conftest drops a test whose code starts a process (each mutant
    would run it again); a stand-in for a module's subprocess (environment.subprocess) starts none."""
    literal = re.search(r"_CHILD = _re\.compile\((r\"[^\"]*\")\)", mutate.SELECT).group(1)
    starts_a_child = re.compile(ast.literal_eval(literal))
    for code in ("done = subprocess.run([sys.executable])", "child = Popen(argv)", "torchrun --nproc-per-node 2"):
        assert starts_a_child.search(code), code
    for code in ('monkeypatch.setattr(environment.subprocess, "run", run)', "from subprocess import CompletedProcess"):
        assert not starts_a_child.search(code), code


@pytest.mark.parametrize(("kind", "heading"), [("independent-teaching", "The teaching size's independent round"),
                                               ("independent-teaching-2", "The teaching size's second round"),
                                               ("independent-teaching-3", "The teaching size's third round"),
                                               ("independent-teaching-4", "The teaching size's fourth round"),
                                               ("independent-teaching-5", "The teaching size's fifth round"),
                                               ("independent-teaching-6", "The teaching size's sixth round"),
                                               ("independent-teaching-7", "The teaching size's seventh round"),
                                               ("independent-teaching-8", "The teaching size's eighth round"),
                                               ("independent-teaching-9", "The teaching size's ninth round"),
                                               ("independent-teaching-10", "The teaching size's tenth round"),
                                               ("independent-teaching-11", "The teaching size's eleventh round"),
                                               ("independent-teaching-12", "The teaching size's twelfth round"),
                                               ("independent-teaching-13", "The teaching size's thirteenth round"),
                                               ("independent-2", "The research size's second round"),
                                               ("independent-3", "The research size's third round"),
                                               ("independent-4", "The research size's fourth round"),
                                               ("independent-5", "The research size's fifth round"),
                                               ("independent-6", "The research size's sixth round"),
                                               ("independent-7", "The research size's seventh round")])
def test_the_readme_quotes_the_plain_rounds_record_as_it_is(kind: str, heading: str):
    """breaks/kill-ratio-<kind>.json (`python scripts/breaks.py kill-ratio --set <kind> --tiers
    plain`) holds results only for breaks of breaks/<kind>.toml, in its order, each tried against
    plain `pytest` (the teaching suite's one tier), with ratios that add up; the template README
    quotes the ratio and the date under the round's heading."""
    record = json.loads((ROOT / "breaks" / breaks.SETS[kind]).read_text(encoding="utf-8"))
    names = [brk.name for brk in breaks.load(kind)]
    assert list(record["caught"]) == [name for name in names if name in record["caught"]]
    assert record["tiers"] == ["plain"] and set(record["caught"].values()) <= {"plain", None}
    caught = list(record["caught"].values())
    assert record["plain"] == f"{caught.count('plain')}/{len(caught)}"
    assert record["tried"] == f"{len(caught)} of {len(names)}"
    section = (ROOT / "README.md").read_text(encoding="utf-8").split(f"### {heading}")[1]
    text = " ".join(section.split("\n### ")[0].split("\n## ")[0].split())
    plain, tried = record["plain"].split("/")
    assert f"**{plain} of {tried}** caught by plain `pytest`" in text and f"on {record['date']}" in text


@pytest.mark.parametrize(("kind", "heading"), [("independent-core", "The core's own round"),
                                               ("independent-core-2", "The core's second round"),
                                               ("independent-core-3", "The core's third round"),
                                               ("independent-core-4", "The core's fourth round"),
                                               ("independent-core-5", "The core's fifth round"),
                                               ("independent-core-6", "The core's sixth round"),
                                               ("independent-core-7", "The core's seventh round"),
                                               ("independent-core-8", "The core's eighth round"),
                                               ("independent-core-9", "The core's ninth round"),
                                               ("independent-core-10", "The core's tenth round"),
                                               ("independent-core-11", "The core's eleventh round"),
                                               ("independent-core-12", "The core's twelfth round"),
                                               ("independent-core-13", "The core's thirteenth round")])
def test_the_readme_quotes_the_cores_round_record_as_it_is(kind: str, heading: str):
    """breaks/kill-ratio-<kind>.json (`python scripts/breaks.py core-catches --set <kind>`) holds a
    result for every break of breaks/<kind>.toml, in its order, each tried against core/tests/ alone,
    with a ratio that adds up; every break is of a file the core holds; the template README quotes
    the ratio and the date under the round's heading."""
    record = json.loads((ROOT / "breaks" / breaks.SETS[kind]).read_text(encoding="utf-8"))
    names = [brk.name for brk in breaks.load(kind)]
    assert kind in breaks.CORE_SETS and list(record["caught"]) == names and record["tiers"] == ["core/tests"]
    assert all((ROOT / "core" / "src" / "repro_core" / brk.file).is_file() for brk in breaks.load(kind))
    caught = list(record["caught"].values())
    assert set(caught) <= {"core/tests", None} and record["tried"] == f"{len(names)} of {len(names)}"
    assert record["core/tests"] == f"{caught.count('core/tests')}/{len(names)}"
    assert all((record["first_failure"][name] is None) == (tier is None) for name, tier in record["caught"].items())
    section = (ROOT / "README.md").read_text(encoding="utf-8").split(f"### {heading}")[1]
    text = " ".join(section.split("\n### ")[0].split("\n## ")[0].split())
    caught_count, tried = record["core/tests"].split("/")
    assert f"**{caught_count} of {tried}** caught by `pytest core/tests`" in text and f"on {record['date']}" in text


def test_the_readme_quotes_the_independent_rounds_record_as_it_is():
    """breaks/kill-ratio-independent.json (`python scripts/breaks.py kill-ratio --set independent`)
    holds results only for breaks of breaks/independent.toml, in its order, with ratios that add up,
    and the template README quotes them and the date; a break counted as caught by no tier met
    every tier (the round's own, or those its survivors were tried against with `--survivors`), and
    one caught by another tier than the plain one met that tier; each break that plain `pytest`
    missed is in the mutation suite now, with the test written for it."""
    record = json.loads((ROOT / "breaks" / "kill-ratio-independent.json").read_text(encoding="utf-8"))
    names = [brk.name for brk in breaks.load("independent")]
    assert list(record["caught"]) == [name for name in names if name in record["caught"]]
    caught = list(record["caught"].values())
    assert record["plain"] == f"{caught.count('plain')}/{len(caught)}"
    assert record["all_tiers"] == f"{sum(tier is not None for tier in caught)}/{len(caught)}"
    assert record["tried"] == f"{len(caught)} of {len(names)}"
    met = {name: {*record["tiers"], *record.get("survivors_tiers", {}).get(name, [])} for name in record["caught"]}
    unmet = [name for name, tier in record["caught"].items() if met[name] != set(breaks.TIERS) and tier is None]
    assert not unmet, f"counted as caught by no tier, but not tried against every tier: {unmet}"
    assert all(tier in met[name] for name, tier in record["caught"].items() if tier is not None)
    suite = {(brk.file, brk.function, brk.replace, brk.with_) for brk in breaks.load("mutations")}
    survivors = [brk for brk in breaks.load("independent") if brk.name in record["caught"]
                 and record["caught"][brk.name] != "plain"]
    missing = [brk.name for brk in survivors if (brk.file, brk.function, brk.replace, brk.with_) not in suite]
    assert not missing, f"survivors of the independent round not yet in breaks/mutations.toml: {missing}"
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### The independent round")[1].split("\n## ")[0]
    text = " ".join(section.split())
    plain, tried = record["plain"].split("/")
    assert f"**{plain} of {tried}** caught by plain `pytest`" in text
    assert f"**{record['all_tiers'].split('/')[0]} of {tried}** by all tiers" in text
    assert f"{record['tried']} breaks" in text and f"on {record['date']}" in text
