"""The READMEs give the set-up in the order a person runs it, and say what the flags mean."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conftest import GENERATED_README, ROOT, TEACHING_README, TEMPLATE_DIR, docs_page, load

CPU_WHEEL = "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"
INSTALL_PROJECT = 'python -m pip install -e ".[dev]"'
SHARED_VENV = "source ../.venv/bin/activate"  # from the project's folder, the template README's .venv


def quick_start_commands(text: str) -> list[str]:
    """The commands of the first code block after "## Quick start" (or its Chinese heading), without
    comments, one a line; `cd X && Y` counts as both."""
    section = re.split(r"^## (?:Quick start|快速上手)$", text, flags=re.M)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        command = line.split("  #")[0].strip()
        if command and not command.startswith("#"):
            commands += [part.strip() for part in command.split(" && ")]
    return commands


def assert_in_order(text: str, *steps: str) -> None:
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [step for step, at in zip(steps, positions, strict=True) if at == -1]
    assert positions == sorted(positions), steps


def test_the_template_readme_sets_up_a_venv_then_the_cpu_wheel_then_bakes_and_installs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert_in_order(text, "-m venv .venv", CPU_WHEEL, "cookiecutter repro-template", INSTALL_PROJECT)


def test_the_generated_readmes_set_up_a_venv_then_the_cpu_wheel_then_the_project():
    for readme in (GENERATED_README["en"], TEACHING_README["en"]):
        assert_in_order(readme.read_text(encoding="utf-8"), "-m venv .venv", CPU_WHEEL, INSTALL_PROJECT, "pytest")


def test_the_template_and_project_quick_starts_are_one_environment_installing_torch_once():
    """The template README's quick start does the project's set-up in the template's .venv, then the
    project README's own commands; both READMEs say that this .venv is the project's too."""
    template = quick_start_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sum(command.startswith("python -m pip install torch") for command in template) == 1
    for language, path in [*GENERATED_README.items(), *TEACHING_README.items()]:
        text = path.read_text(encoding="utf-8")
        project = [command.replace("{{ cookiecutter.project_slug }}", "my_project")
                   for command in quick_start_commands(text)]
        setup = project[: project.index(INSTALL_PROJECT) + 1]
        assert setup == ["python -m venv .venv", "source .venv/bin/activate", CPU_WHEEL, INSTALL_PROJECT], language
        # The template's .venv is made once, with the same CPU wheel, and the project installed into it.
        assert [c.replace("python3 ", "python ") for c in template if c in setup or c.startswith("python3 -m venv")] \
            == setup, language
        after = project[len(setup):]
        assert template[-len(after):] == after, language  # then the very same commands, in the same order
        assert SHARED_VENV in text, language
    assert SHARED_VENV in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_dev_extra_is_what_tests_and_lint_need_and_tensorboard_stays_optional(cookies):
    project = cookies.bake(extra_context={"init_git": False}).project_path
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    dev = sorted(re.split(r"[<>=]", requirement)[0] for requirement in extras["dev"])
    assert dev == ["pytest", "pytest-xdist", "ruff"]  # xdist: a plain pytest on every core
    assert [re.split(r"[<>=]", requirement)[0] for requirement in extras["tensorboard"]] == ["tensorboard"]


def test_the_research_readmes_quote_what_pytest_says_without_pytest_xdist_and_what_brings_it(cookies):
    """A pytest without pytest-xdist cannot read a research bake's `-n auto` (pyproject.toml's
    addopts): both READMEs quote the line it stops with, and the install that brings the plugin."""
    project = cookies.bake(extra_context={"init_git": False}).project_path
    said = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider"], cwd=project,
                          capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    assert said.returncode == 4, said.stdout + said.stderr  # pytest's usage error
    line = next(line for line in said.stderr.splitlines() if "error:" in line)
    quoted = f"`pytest: {line[line.index('error:'):]}`"
    for language, readme in GENERATED_README.items():
        text = readme.read_text(encoding="utf-8")
        assert quoted in text, f"{language}: {quoted}"
        assert 'pip install -e ".[dev]"' in text[text.index(quoted):][:400], language  # in the same sentence


def test_the_teaching_command_bakes_without_asking_anything(tmp_path):
    """The Teaching section's command, run as printed (the template's path for `repro-template`),
    with no terminal to answer on: a question would end it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Teaching with it", 1)[1]
    command = section.split("```bash\n", 1)[1].split("\n", 1)[0]
    args = [str(ROOT) if arg == "repro-template" else arg for arg in shlex.split(command)]
    assert args[0] == "cookiecutter"
    result = subprocess.run([sys.executable, "-m", *args, "init_git=no"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    project = tmp_path / "reproducible_training"
    assert (project / "exercises").is_dir() and "快速上手" in (project / "README.md").read_text(encoding="utf-8")


def test_git_ignores_the_folders_that_the_readmes_commands_write(cookies):
    project = cookies.bake(extra_context={"init_git": False}).project_path
    paths = ["runs/a/model.pt", "runs/a/metrics.csv", "studies/base/study.json", "studies/base/seed-0/config.json"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=project, capture_output=True, text=True)
    assert ignored.stdout.split() == paths


def test_the_generated_readme_says_the_batch_size_is_the_global_batch_and_how_it_is_shared():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert "| `--batch-size` | 64 | the global batch: samples per optimizer step, over all processes and" in text
    distributed = docs_page("distributed").read_text(encoding="utf-8")
    assert "each process takes 64 / (4 × 2) = 8 samples at a time" in distributed


def test_the_generated_readme_teaches_bringing_your_own_task():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert "## Bring your own task" in text and "### What the tests need from your task" in text
    assert "## State carried between batches" in docs_page("tasks").read_text(encoding="utf-8")
    assert "Do not keep a generator of your own" in text


def test_the_readmes_f1_recipe_computes_scikit_learns_macro_f1_over_a_whole_split_from_batch_sums():
    """The README's answer to "a metric that is not a mean of per-batch parts", run: its sums added
    up over batches give exactly scikit-learn's macro-F1 of the whole split."""
    import torch
    import torch.nn.functional as F
    from sklearn.metrics import f1_score

    text = docs_page("tasks").read_text(encoding="utf-8")
    [recipe] = [block for block in text.split("```python\n")[1:] if "macro_f1" in block.split("```")[0]]
    namespace = {"F": F, "NUM_CLASSES": 4}
    exec(recipe.split("```")[0], namespace)
    generator = torch.Generator().manual_seed(0)
    outputs, targets = torch.randn(100, 4, generator=generator), torch.randint(0, 4, (100,), generator=generator)
    totals = None
    for start in range(0, 100, 32):  # batches of 32, 32, 32 and 4, as evaluation sees them
        sums = namespace["batch_sums"](outputs[start:start + 32], targets[start:start + 32])
        totals = sums if totals is None else {name: totals[name] + value for name, value in sums.items()}
    macro_f1 = float(namespace["metrics_from_sums"](totals)["macro_f1"])
    expected = f1_score(targets.numpy(), outputs.argmax(dim=1).numpy(), average="macro")
    assert abs(macro_f1 - expected) < 1e-6


def test_each_language_bakes_one_readme_in_that_language(cookies):
    english = cookies.bake(extra_context={"language": "en"}).project_path
    chinese = cookies.bake(extra_context={"language": "zh"}).project_path
    for project in (english, chinese):
        assert sorted(path.name for path in project.glob("README*")) == ["README.md"]
    assert "## Quick start" in (english / "README.md").read_text(encoding="utf-8")
    zh = (chinese / "README.md").read_text(encoding="utf-8")
    assert "## Quick start" not in zh and sum("\u4e00" <= c <= "\u9fff" for c in zh) > 5000
    assert (chinese / "exercises").is_dir() and (english / "exercises").is_dir()


def text_of(path) -> str:
    """A file's text; "" for a file that is not UTF-8 text (the pictures), which is copied as it is."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def test_cookiecutter_reads_every_template_file_that_holds_jinja_as_text():
    """cookiecutter copies a file it guesses to be binary without rendering it (binaryornot's guess
    from the first 1024 bytes): a README whose start is mostly Chinese can be guessed so, and its
    `{{ cookiecutter.project_name }}` would reach the project as written."""
    from binaryornot.check import is_binary



    templated = [path for path in TEMPLATE_DIR.rglob("*") if path.is_file() and path.suffix != ".patch"
                 and any(mark in text_of(path) for mark in ("{{", "{%"))]
    assert len(templated) > 10
    assert [path.relative_to(TEMPLATE_DIR).as_posix() for path in templated if is_binary(str(path))] == []


def joined_lines(text: str) -> list[str]:
    """Lines with shell continuations (a trailing backslash) joined, spaces collapsed."""
    return [" ".join(line.split()) for line in re.sub(r"\\\n\s*", " ", text).splitlines()]


def test_the_picture_in_the_readmes_is_drawn_by_the_generated_readmes_own_commands():
    """scripts/picture.sh runs the studies and plot commands of the generated docs/studies.md (its --out
    aside), and that page in each language shows the picture it writes."""
    script = (ROOT / "scripts" / "picture.sh").read_text(encoding="utf-8")
    commands = [line.replace('"$PY" -m my_project.', "python -m {{ cookiecutter.project_slug }}.").split(" >&2")[0]
                for line in joined_lines(script) if line.startswith('"$PY" -m my_project.')]
    assert [re.search(r"\}\}\.(\w+)", command).group(1) for command in commands] == ["study", "study", "plot"]
    for language in ("en", "zh"):
        path = docs_page("studies", language)
        readme = joined_lines(path.read_text(encoding="utf-8"))
        for command in commands:
            expected = command.replace("--out study.png", "--out lr.pdf")
            assert any(line.split("  #")[0].strip() == expected for line in readme), (language, expected)
        assert "](study.png)" in path.read_text(encoding="utf-8"), language
    assert "](docs/study.png)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert (ROOT / "docs" / "study.png").read_bytes().startswith(b"\x89PNG")


def test_the_readmes_table_of_the_two_sizes_is_what_scripts_sizes_py_counts_now():
    """The figures of "Two sizes" come from a command: after a change to the generated project,
    `python scripts/sizes.py --readme` puts the table in."""
    sizes = load("sizes", ROOT / "scripts" / "sizes.py")
    table = sizes.table(sizes.measure())
    assert table in (ROOT / "README.md").read_text(encoding="utf-8"), f"run python scripts/sizes.py --readme:\n{table}"
