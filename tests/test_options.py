"""The template README's checklist for adding an option, enforced: each option of cookiecutter.json is
in every place that must know it, and a missing one fails here, naming the place."""

from __future__ import annotations

import subprocess
import sys

from conftest import COOKIECUTTER_JSON, ROOT, TEMPLATE_DIR, pre_gen
from test_bake import COMBINATIONS

OPTIONS = [name for name in COOKIECUTTER_JSON if not name.startswith("_")]


def template_text() -> str:
    """Every file the template renders, its file names too, and the hooks."""
    parts = [path.relative_to(ROOT).as_posix() for path in TEMPLATE_DIR.rglob("*")]
    parts += [path.read_text(encoding="utf-8") for path in TEMPLATE_DIR.rglob("*")
              if path.is_file() and path.suffix != ".patch" and ".png" not in path.name]  # pictures are not text
    return "\n".join(parts)


def hooks_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "hooks").glob("*.py"))


def missing_places(option: str, rendered: str, hooks: str, readme: str) -> list[str]:
    value, places = COOKIECUTTER_JSON[option], []
    if option not in COOKIECUTTER_JSON.get("__prompts__", {}):
        places.append("cookiecutter.json's __prompts__ (a labelled question)")
    if isinstance(value, list) and tuple(value) != pre_gen.CHOICES.get(option):
        places.append("hooks/pre_gen_project.py CHOICES (its choices, in cookiecutter.json's order)")
    if isinstance(value, bool) and option not in pre_gen.BOOLEANS:
        places.append("hooks/pre_gen_project.py BOOLEANS")
    if isinstance(value, (list, bool)):
        default = value[0] if isinstance(value, list) else value
        used = {context.get(option, default) for context in COMBINATIONS.values()}
        if used != (set(value) if isinstance(value, list) else {True, False}):
            places.append("tests/test_bake.py COMBINATIONS (every value in some combination)")
    if f"cookiecutter.{option}" not in rendered and f'"{option}"' not in hooks:
        places.append(f"a file of the template that uses it (cookiecutter.{option}), or the post-gen hook")
    if f"| `{option}` |" not in readme:
        places.append("the Options table of README.md")
    return places


def test_every_option_is_in_every_place_that_must_know_it():
    rendered, hooks = template_text(), hooks_text()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = {option: places for option in OPTIONS if (places := missing_places(option, rendered, hooks, readme))}
    assert not missing, "add each option to: " + "; ".join(f"{o}: {', '.join(p)}" for o, p in missing.items())


def test_copier_yml_is_generated_from_the_current_options():
    """copier.yml is written by scripts/generate_copier.py; after adding an option, run it."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_copier.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_checklist_names_every_place_this_test_checks():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    checklist = readme.split("### Adding an option", 1)[1].split("\n## ", 1)[0]
    for place in ("cookiecutter.json", "__prompts__", "CHOICES", "BOOLEANS", "COMBINATIONS", "generate_copier.py",
                  "paths_to_remove", "Options table", "tests/test_options.py"):
        assert place in checklist, place
