"""The READMEs give the set-up in the order a person runs it, and say what the flags mean."""

from __future__ import annotations

from conftest import GENERATED_README, ROOT

CPU_WHEEL = "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"


def assert_in_order(text: str, *steps: str) -> None:
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [step for step, at in zip(steps, positions, strict=True) if at == -1]
    assert positions == sorted(positions), steps


def test_the_template_readme_sets_up_a_venv_then_the_cpu_wheel_then_bakes_and_installs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert_in_order(text, "-m venv .venv", CPU_WHEEL, "cookiecutter gh:", 'python -m pip install -e ".[dev]"')


def test_the_generated_readme_sets_up_a_venv_then_the_cpu_wheel_then_the_project():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert_in_order(text, "-m venv .venv", CPU_WHEEL, 'python -m pip install -e ".[dev]"', "pytest")


def test_the_generated_readme_says_the_batch_size_is_per_process_under_torchrun():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert "samples per optimizer step **in each process**" in text
    assert "the global batch is N × 64" in text


def test_the_generated_readme_teaches_bringing_your_own_data_and_model():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert "## Bring your own data and model" in text
    assert "def make_datasets(config):" in text and "def make_model(config):" in text
    assert "Do not keep a generator of your own" in text


def test_each_language_bakes_one_readme_in_that_language(cookies):
    english = cookies.bake(extra_context={"language": "en"}).project_path
    chinese = cookies.bake(extra_context={"language": "zh"}).project_path
    for project in (english, chinese):
        assert sorted(path.name for path in project.glob("README*")) == ["README.md"]
    assert "## Quick start" in (english / "README.md").read_text(encoding="utf-8")
    zh = (chinese / "README.md").read_text(encoding="utf-8")
    assert "## Quick start" not in zh and sum("\u4e00" <= c <= "\u9fff" for c in zh) > 5000
    assert (chinese / "exercises").is_dir() and (english / "exercises").is_dir()
