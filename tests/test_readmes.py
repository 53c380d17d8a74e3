"""The READMEs give the set-up in the order a person runs it, and say what the flags mean."""

from __future__ import annotations

from conftest import ROOT

CPU_WHEEL = "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"


def assert_in_order(text: str, *steps: str) -> None:
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [step for step, at in zip(steps, positions, strict=True) if at == -1]
    assert positions == sorted(positions), steps


def test_the_template_readme_sets_up_a_venv_then_the_cpu_wheel_then_bakes_and_installs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert_in_order(text, "-m venv .venv", CPU_WHEEL, "cookiecutter gh:", 'python -m pip install -e ".[dev]"')


def test_the_generated_readme_sets_up_a_venv_then_the_cpu_wheel_then_the_project():
    text = (ROOT / "{{cookiecutter.project_slug}}" / "README.md").read_text(encoding="utf-8")
    assert_in_order(text, "-m venv .venv", CPU_WHEEL, 'python -m pip install -e ".[dev]"', "pytest")


def test_the_generated_readme_says_the_batch_size_is_per_process_under_torchrun():
    text = (ROOT / "{{cookiecutter.project_slug}}" / "README.md").read_text(encoding="utf-8")
    assert "samples per optimizer step **in each process**" in text
    assert "the global batch is N × 64" in text


def test_the_generated_readme_teaches_bringing_your_own_data_and_model():
    text = (ROOT / "{{cookiecutter.project_slug}}" / "README.md").read_text(encoding="utf-8")
    assert "## Bring your own data and model" in text
    assert "def make_datasets(config):" in text and "def make_model(config):" in text
    assert "Do not keep a generator of your own" in text
