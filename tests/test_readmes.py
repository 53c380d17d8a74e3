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


def test_the_generated_readme_says_the_batch_size_is_the_global_batch_and_how_it_is_shared():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert "| `--batch-size` | 64 | the global batch: samples per optimizer step, over all processes and" in text
    assert "each process takes 64 / (4 × 2) = 8 samples at a time" in text


def test_the_generated_readme_teaches_bringing_your_own_task():
    text = GENERATED_README["en"].read_text(encoding="utf-8")
    assert "## Bring your own task" in text and "### What the tests need from your task" in text
    assert "### State carried between batches" in text
    assert "Do not keep a generator of your own" in text


def test_the_readmes_f1_recipe_computes_scikit_learns_macro_f1_over_a_whole_split_from_batch_sums():
    """The README's answer to "a metric that is not a mean of per-batch parts", run: its sums added
    up over batches give exactly scikit-learn's macro-F1 of the whole split."""
    import torch
    import torch.nn.functional as F
    from sklearn.metrics import f1_score

    text = GENERATED_README["en"].read_text(encoding="utf-8")
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
