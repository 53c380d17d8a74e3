"""The hooks and filters: unit tests of each check, and each refusal seen as a user sees it."""

from __future__ import annotations

import json
import keyword
import subprocess
import sys

import pytest

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from conftest import AWKWARD_NAME, COOKIECUTTER_JSON, GENERATED_README, ROOT, cookiecutter_cli, post_gen, pre_gen

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
    "standard-library module": ({"project_slug": "random"}, "would shadow the module 'random'"),
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


# Values that cookiecutter itself refuses, before any hook runs: a choice that is not in
# cookiecutter.json's list, a boolean it cannot read. Each: the extra context, and a piece of the
# last line of cookiecutter's traceback, which is the reason.
REFUSED_BY_COOKIECUTTER = {
    "dataset not a choice": (
        {"dataset": "Digits"},
        "ValueError: Digits provided for choice variable dataset, but the choices are ['synthetic', 'digits'].",
    ),
    "license not a choice": ({"license": "GPL"}, "ValueError: GPL provided for choice variable license"),
    "init_git not a boolean": (
        {"init_git": "maybe"}, "ValueError: maybe provided for variable init_git could not be converted to a boolean.",
    ),
    # cookiecutter makes the project's folder before the pre-generation hook runs; the hook's check
    # (check_slug) is what copier asks at its question.
    "package name over a folder name's limit": ({"project_slug": "a" * 256}, "OSError: [Errno 36] File name too long"),
}


def pairs(context: dict) -> list[str]:
    return [f"{key}={value}" for key, value in context.items()]


@pytest.mark.parametrize("context, message", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_refused_input_prints_one_line_exits_non_zero_and_leaves_no_folder(context, message, tmp_path):
    result = cookiecutter_cli(tmp_path / "out", *pairs(context))
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(ours) == 1 and message in ours[0], result.stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_after_a_hook_refusal_cookiecutter_prints_its_traceback_and_the_hooks_one_line_is_all_it_printed(tmp_path):
    """What the template README tells the user to expect, in cookiecutter 2.7."""
    result = cookiecutter_cli(tmp_path / "out", "project_slug=class")
    assert result.returncode != 0
    assert result.stderr.splitlines() == ["error: the package name 'class' is a Python keyword"]
    assert "Stopping generation because pre_gen_project hook script didn't exit successfully" in result.stdout
    assert result.stdout.rstrip().endswith("Hook script failed (exit status: 1)"), result.stdout


@pytest.mark.parametrize("refusal", ["project_slug=class", "dataset=Digits"])
def test_the_readme_quotes_what_cookiecutter_really_prints_around_a_refusal(refusal, tmp_path):
    result = cookiecutter_cli(tmp_path / "out", refusal)
    lines = (result.stderr + result.stdout).strip().splitlines()  # the hook's line comes first on a terminal
    quoted = [lines[-1]] + ([lines[0], lines[1], lines[-2]] if refusal == "project_slug=class" else [])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(line in readme for line in quoted), quoted


@pytest.mark.parametrize("context, message", REFUSED_BY_COOKIECUTTER.values(), ids=REFUSED_BY_COOKIECUTTER.keys())
def test_a_value_cookiecutter_refuses_ends_its_traceback_with_the_reason_and_leaves_no_folder(
        context, message, tmp_path):
    result = cookiecutter_cli(tmp_path / "out", *pairs(context))
    assert result.returncode != 0
    assert result.stderr.rstrip().splitlines()[-1].startswith(message), result.stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_a_replayed_choice_outside_the_list_is_refused_by_the_hook_in_one_line(tmp_path):
    """A replay file skips cookiecutter's own check of the choices; the hook's check catches it."""
    config = tmp_path / "config.yaml"
    config.write_text(f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\n", encoding="utf-8")
    first = cookiecutter_cli(tmp_path / "first", "--config-file", str(config), "init_git=no")
    assert first.returncode == 0, first.stdout + first.stderr
    [replay] = (tmp_path / "replay").glob("*.json")
    context = json.loads(replay.read_text(encoding="utf-8"))
    context["cookiecutter"]["dataset"] = "Digits"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(context), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run([sys.executable, "-m", "cookiecutter", "--config-file", str(config),
                             "--replay-file", str(edited), "-o", str(out), str(ROOT)], capture_output=True, text=True)
    assert result.returncode != 0
    assert result.stderr.splitlines() == ["error: dataset 'Digits' is not one of synthetic, digits"], result.stderr
    assert list(out.iterdir()) == []


def test_the_hook_knows_the_same_choices_and_booleans_as_cookiecutter_json():
    options = {key: value for key, value in COOKIECUTTER_JSON.items() if not key.startswith("_")}
    choices = {key: tuple(value) for key, value in options.items() if isinstance(value, list)}
    booleans = {key for key, value in options.items() if isinstance(value, bool)}
    assert pre_gen.CHOICES == choices
    assert set(pre_gen.BOOLEANS) == booleans


def test_a_choice_outside_the_list_is_refused_in_one_line_naming_the_choices():
    assert pre_gen.check_choices(defaults(dataset="Digits")) == "dataset 'Digits' is not one of synthetic, digits"
    assert pre_gen.check_choices(defaults(license="GPL")) == (
        "license 'GPL' is not one of MIT, BSD-3-Clause, Apache-2.0, none")


def test_the_hook_prints_nothing_but_its_one_line_reason(capsys):
    assert pre_gen.main(defaults(project_slug="class")) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["error: the package name 'class' is a Python keyword"]


def test_the_default_e_mail_is_empty_and_valid():
    assert COOKIECUTTER_JSON["author_email"] == ""
    assert pre_gen.check_combination(defaults()) is None
    assert "Enter for none" in COOKIECUTTER_JSON["__prompts__"]["author_email"]


def test_init_git_is_an_option_on_by_default_with_a_prompt():
    assert COOKIECUTTER_JSON["init_git"] is True
    assert "git" in COOKIECUTTER_JSON["__prompts__"]["init_git"]


def test_the_package_name_prompt_says_latin_letters_are_needed_and_what_happens_without():
    prompt = COOKIECUTTER_JSON["__prompts__"]["project_slug"]
    assert "Latin letters" in prompt and "'project'" in prompt


@pytest.mark.parametrize("slug", ["my_project", "o_brien_quoted_back_slash", "mnist2", "match"])
def test_good_slugs_pass(slug):
    assert pre_gen.check_slug(slug) is None


@pytest.mark.parametrize("seed", ["0", "42", "4294967295"])
def test_seeds_in_range_pass(seed):
    assert pre_gen.check_seed(seed) is None


def test_the_defaults_pass_every_check():
    assert pre_gen.validate(defaults()) is None
    assert pre_gen.main(defaults()) == 0


@pytest.mark.parametrize("key", ["github_actions", "pre_commit", "init_git"])
def test_a_non_boolean_option_is_refused(key):
    assert "must be true or false" in pre_gen.check_choices(defaults(**{key: "yes"}))


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


def test_post_gen_keeps_everything_the_options_turned_on_and_only_the_sizes_own_files(tmp_path):
    """The defaults turn every option on: what goes is what only the other size has."""
    assert post_gen.paths_to_remove(defaults()) == list(post_gen.TEACHING_ONLY)
    teaching = post_gen.paths_to_remove(defaults(scope="teaching"))
    assert teaching == [path.format(package="my_project") for path in post_gen.RESEARCH_ONLY]
    assert "src/my_project/engine" in teaching and "notebooks" not in teaching


def test_the_next_steps_message_is_one_line_when_there_is_nothing_to_warn_about(tmp_path):
    """cruft prints it again on every diff and update, so it is short."""
    (tmp_path / "LICENSE").write_text("Copyright (c) 2026 Ada Lovelace\n", encoding="utf-8")
    message = post_gen.next_steps(defaults(author_name="Ada Lovelace"), tmp_path, [])
    assert message == "Created my_project/. Next steps: my_project/README.md, 'Quick start'."


def test_the_next_steps_message_carries_the_notes_it_is_given(tmp_path):
    message = post_gen.next_steps(defaults(), tmp_path, ["note: one", "note: two"])
    assert message.splitlines()[1:] == ["note: one", "note: two"]


@pytest.mark.parametrize("name", ["复现实验", "项目 !"])
def test_a_project_name_without_latin_letters_gets_a_note_on_why_the_package_is_called_project(name, tmp_path):
    assert local_extensions.identifier(name) == "project"
    message = post_gen.next_steps(defaults(project_name=name, project_slug="project"), tmp_path, [])
    assert "no Latin letters" in message and "project_slug=" in message


@pytest.mark.parametrize("name, slug", [("Project", "project"), ("复现实验", "fuxian")])
def test_a_package_name_that_was_chosen_gets_no_such_note(name, slug, tmp_path):
    assert "Latin letters" not in post_gen.next_steps(defaults(project_name=name, project_slug=slug), tmp_path, [])


def test_a_license_naming_the_placeholder_author_gets_a_note(tmp_path):
    (tmp_path / "LICENSE").write_text("Copyright (c) 2026 Your Name\n", encoding="utf-8")
    message = post_gen.next_steps(defaults(), tmp_path, [])
    assert "LICENSE names the placeholder 'Your Name'" in message and "author_name=" in message


def test_no_license_means_no_placeholder_note(tmp_path):
    assert "placeholder" not in post_gen.next_steps(defaults(license="none"), tmp_path, [])


def test_the_identifier_filter_lowercases_and_joins_other_characters_with_underscores():
    assert local_extensions.identifier(AWKWARD_NAME) == "o_brien_quoted_back_slash"
    assert local_extensions.identifier("  My  ML--Project 2 ") == "my_ml_project_2"
    assert local_extensions.identifier("项目") == "project"  # nothing to keep: a neutral name to edit
    assert local_extensions.identifier('Ünïcode "Quoted" 名前') == "unicode_quoted"  # accents come off, not letters


# Project names whose plain derivation (lower case, other characters made `_`) the hook would refuse.
REFUSED_DERIVATIONS = {"Random": "random_project", "Class": "class_project", "Test": "test_project",
                       "Torch": "torch_project", "3D Model": "project_3d_model", "复现 1": "project_1"}


@pytest.mark.parametrize("name, slug", REFUSED_DERIVATIONS.items())
def test_a_derived_package_name_that_the_hook_would_refuse_is_changed_into_one_it_takes(name, slug):
    assert local_extensions.identifier(name) == slug
    assert pre_gen.check_slug(slug) is None


def test_no_module_name_or_keyword_derives_a_refused_package_name():
    names = [*sys.stdlib_module_names, *pre_gen.SHADOWED, *keyword.kwlist]
    refused = {name: local_extensions.identifier(name.title()) for name in names
               if pre_gen.check_slug(local_extensions.identifier(name.title()))}
    assert refused == {}


def test_a_name_whose_plain_package_name_is_refused_bakes_with_every_default(tmp_path):
    """`Random` would give `random`, which the hook refuses: the default must bake all the same."""
    result = cookiecutter_cli(tmp_path / "out", "project_name=Random", "init_git=no")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "random_project" / "src" / "random_project" / "train.py").is_file()
    assert result.stdout.startswith("Created random_project/.")


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


# Where a project came from, as cookiecutter and cruft (`_template`) or copier (`_src_path`) have it,
# and the page its README links to: a web address's page; for a local path, the template's published
# address (cookiecutter.json's __template_url), or no link while that is empty.
TEMPLATE_SOURCES = {
    "gh:alice/repro-template": "https://github.com/alice/repro-template",
    "gl:alice/repro-template": "https://gitlab.com/alice/repro-template",
    "https://github.com/alice/repro-template.git": "https://github.com/alice/repro-template",
    "https://alice:secret-token@github.com/alice/repro-template/": "https://github.com/alice/repro-template",
    "git+https://example.org/alice/repro-template": "https://example.org/alice/repro-template",
    "git@github.com:alice/repro-template.git": "https://github.com/alice/repro-template",
    "ssh://git@gitlab.com/alice/repro-template.git": "https://gitlab.com/alice/repro-template",
    ".": "", "repro-template": "", "/home/alice/repro-template": "", "file:///home/alice/repro-template": "",
}


@pytest.mark.parametrize("source, page", TEMPLATE_SOURCES.items())
def test_the_template_page_is_the_web_address_a_project_came_from_and_never_a_local_path(source, page):
    assert local_extensions.template_page(source, "") == page
    published = "https://example.org/published/repro-template"
    assert local_extensions.template_page(source, published) == (page or published)


def render_readme_head(language: str, source: str, published: str = "") -> str:
    """The generated README's first paragraphs, rendered as the tools render them."""
    import jinja2

    environment = jinja2.Environment(extensions=[local_extensions.Filters], undefined=jinja2.StrictUndefined)
    head = GENERATED_README[language].read_text(encoding="utf-8").split("\n## ", 1)[0]
    context = {"project_name": "P", "description": "D", "_template": source, "__template_url": published}
    return environment.from_string(head).render(cookiecutter=context)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_generated_readme_links_to_where_the_project_came_from(language):
    assert "[repro-template](https://github.com/alice/repro-template)" in render_readme_head(
        language, "gh:alice/repro-template")
    local = render_readme_head(language, "/home/alice/repro-template")
    assert "repro-template" in local and "](" not in local and "/home/alice" not in local
    assert "[repro-template](https://example.org/t)" in render_readme_head(language, ".", "https://example.org/t")


def test_the_template_address_is_one_setting_that_the_template_readme_names():
    assert COOKIECUTTER_JSON["__template_url"] == ""  # no page that does not exist: empty until published
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`__template_url` in\n`cookiecutter.json`" in readme or "`__template_url` in `cookiecutter.json`" in readme
    assert "org/repro-template" not in readme


def test_the_hook_refuses_a_package_name_too_long_for_the_generated_codes_lines_in_one_sentence(tmp_path):
    """32 characters at most: tests/test_bake.py lints a bake of that length in each size."""
    refusal = pre_gen.check_slug("a" * 33)
    assert refusal == ("the package name is 33 characters long, over the 32 that keep the generated code's lines "
                       "within its linter's 120 columns: choose a shorter project_slug")
    assert pre_gen.check_slug("a" * 32) is None
    result = cookiecutter_cli(tmp_path / "out", f"project_slug={'a' * 33}", "init_git=no")
    assert result.returncode != 0 and refusal in result.stderr
    assert not (tmp_path / "out" / ("a" * 33)).exists()


def test_a_long_project_name_derives_a_package_name_the_hook_takes_and_it_bakes(tmp_path):
    """The derived name is cut to the longest the hook takes: the defaults always bake."""
    slug = local_extensions.identifier("Experiment " * 30)  # 330 characters
    assert len(slug) == pre_gen.PACKAGE_MAX and pre_gen.check_slug(slug) is None
    result = cookiecutter_cli(tmp_path / "out", f"project_name={'Experiment ' * 30}", "init_git=no")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / slug / "src" / slug / "train.py").is_file()


def test_answers_that_land_in_code_are_written_normalised(tmp_path):
    """A seed with leading zeros or spaces, a Python version or an e-mail with spaces around it: the
    hook reads them stripped, so the files get them so (`DEFAULT_SEED = 042` would not even parse)."""
    result = cookiecutter_cli(tmp_path / "out", "seed= 042", "python_version= 3.11 ", "author_email= ada@example.org ",
                              "init_git=no")
    assert result.returncode == 0, result.stderr
    project = tmp_path / "out" / "my_project"
    init = (project / "src" / "my_project" / "__init__.py").read_text(encoding="utf-8")
    assert "DEFAULT_SEED = 42  #" in init
    compile(init, "__init__.py", "exec")
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert pyproject["project"]["authors"][0]["email"] == "ada@example.org"
    assert pyproject["tool"]["ruff"]["target-version"] == "py311"
    assert '["3.11", "3.13"]' in (project / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
