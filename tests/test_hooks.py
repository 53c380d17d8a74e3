"""The hooks and filters: unit tests of each check, and each refusal seen as a user sees it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conftest import AWKWARD_NAME, COOKIECUTTER_JSON, ROOT


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pre_gen = load("pre_gen_project", ROOT / "hooks" / "pre_gen_project.py")
post_gen = load("post_gen_project", ROOT / "hooks" / "post_gen_project.py")
sys.path.insert(0, str(ROOT))
import local_extensions  # noqa: E402


def defaults(**overrides) -> dict:
    context = {key: (value[0] if isinstance(value, list) else value)
               for key, value in COOKIECUTTER_JSON.items() if not key.startswith("_")}
    context["project_slug"] = "my_project"
    context["seed"] = str(context["seed"])
    context.update(overrides)
    return context


# Each refused input: the extra context, and a piece of the one line the user reads.
REFUSALS = {
    "keyword": ({"project_slug": "class"}, "is a Python keyword"),
    "standard-library module": ({"project_name": "Random"}, "would shadow the module 'random'"),
    "test module": ({"project_slug": "test"}, "would shadow the module 'test'"),
    "torch": ({"project_slug": "torch"}, "would shadow the module 'torch'"),
    "numpy": ({"project_slug": "numpy"}, "would shadow the module 'numpy'"),
    "starts with a digit": ({"project_slug": "3d_model"}, "is not a lower-case Python identifier"),
    "upper case": ({"project_slug": "MyModel"}, "is not a lower-case Python identifier"),
    "hyphen": ({"project_slug": "my-model"}, "is not a lower-case Python identifier"),
    "negative seed": ({"seed": "-1"}, "is not an integer in 0 .. 4294967295"),
    "seed above 2**32-1": ({"seed": "4294967296"}, "is not an integer in 0 .. 4294967295"),
    "seed not a number": ({"seed": "forty-two"}, "is not an integer in 0 .. 4294967295"),
    "python too old": ({"python_version": "3.8"}, "is not 3.10 or newer"),
    "python malformed": ({"python_version": "3"}, "is not 3.10 or newer"),
    "a license without a holder": ({"author_name": " ", "license": "MIT"}, "needs a copyright holder"),
    "e-mail malformed": ({"author_email": "not an address"}, "is not an e-mail address"),
}


@pytest.mark.parametrize("context, message", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_refused_input_prints_one_line_exits_non_zero_and_leaves_no_folder(context, message, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pairs = [f"{key}={value}" for key, value in context.items()]
    result = subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(out), str(ROOT), *pairs],
                            capture_output=True, text=True)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(ours) == 1 and message in ours[0], result.stderr
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("slug", ["my_project", "o_brien_quoted_back_slash", "mnist2", "match"])
def test_good_slugs_pass(slug):
    assert pre_gen.check_slug(slug) is None


@pytest.mark.parametrize("seed", ["0", "42", "4294967295"])
def test_seeds_in_range_pass(seed):
    assert pre_gen.check_seed(seed) is None


def test_the_defaults_pass_every_check():
    assert pre_gen.validate(defaults()) is None
    assert pre_gen.main(defaults()) == 0


def test_a_non_boolean_option_is_refused():
    assert "must be true or false" in pre_gen.check_combination(defaults(github_actions="yes"))


def test_an_old_cookiecutter_is_refused(monkeypatch):
    monkeypatch.setattr(pre_gen.metadata, "version", lambda name: "2.6.0")
    assert "needs 2.7 or newer" in pre_gen.check_cookiecutter_version()
    monkeypatch.setattr(pre_gen.metadata, "version", lambda name: "2.7.1")
    assert pre_gen.check_cookiecutter_version() is None


def test_post_gen_removes_what_the_options_turned_off_and_can_run_twice(tmp_path, capsys):
    for name in ("LICENSE", ".pre-commit-config.yaml", "README.md"):
        (tmp_path / name).write_text("x")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    context = defaults(license="none", github_actions=False, pre_commit=False)
    for _ in range(2):  # cruft runs the hook again on update
        post_gen.prune(tmp_path, context)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def test_post_gen_keeps_everything_the_options_turned_on(tmp_path):
    assert post_gen.paths_to_remove(defaults()) == []


def test_the_identifier_filter_lowercases_and_joins_other_characters_with_underscores():
    assert local_extensions.identifier(AWKWARD_NAME) == "o_brien_quoted_back_slash"
    assert local_extensions.identifier("  My  ML--Project 2 ") == "my_ml_project_2"
    assert local_extensions.identifier("项目") == "project"  # nothing to keep: a neutral name to edit
    assert local_extensions.identifier('Ünïcode "Quoted" 名前') == "unicode_quoted"  # accents come off, not letters


def test_an_empty_package_name_is_refused():
    assert "empty" in pre_gen.check_slug("")


def test_the_tojson_filter_gives_one_literal_valid_in_python_toml_and_yaml_and_keeps_chinese_readable():
    import yaml

    tricky = AWKWARD_NAME + "\t\x7f\n"
    literal = local_extensions.tojson(tricky)
    assert "项目" in literal
    assert eval(literal) == tricky  # a Python string literal  # noqa: S307
    assert tomllib.loads(f"x = {literal}")["x"] == tricky
    assert yaml.safe_load(f"x: {literal}")["x"] == tricky
    assert json.loads(literal) == tricky
