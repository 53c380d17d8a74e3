"""Refuses inputs that would bake a broken project, before any file is written.

Standard library only: cookiecutter runs this with its own interpreter, before the project's
dependencies exist. Each refusal is one line on stderr, the only thing this hook prints, and exit 1;
cookiecutter then removes the half-made folder and prints its own traceback after our line (see the
README). The checks are plain functions so that tests/test_hooks.py can call them, and so that
copier runs the very same functions as its questions' validators: local_extensions.py exposes
ANSWER_CHECKS to copier.yml, which scripts/generate_copier.py writes from this table.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from importlib import metadata

MAX_SEED = 2**32 - 1
# Characters in the package name: the longest for which every line of a bake that names the package
# stays within the generated ruff's 120 columns (tests/test_bake.py bakes such a name in each size
# and lints it), well inside a folder name's 255 bytes. PEP 8 asks for short names anyway.
PACKAGE_MAX = 32
MIN_PYTHON_MINOR = 10  # torch 2.x wheels need Python 3.10 or newer
MIN_COOKIECUTTER = (2, 7)  # real booleans in cookiecutter.json, __prompts__, local extensions

# The choice lists of cookiecutter.json, repeated here because the hook cannot read that file: it
# is run from a rendered copy in a temporary folder, and under cruft the template is a scratch clone
# whose path the context does not carry. tests/test_hooks.py checks that the two agree.
# cookiecutter itself refuses an unknown choice given on the command line (with a traceback, before
# this hook runs); this check catches what skips that validation, such as an edited replay file.
CHOICES = {
    "scope": ("research", "teaching"),
    "determinism": ("strict", "warn", "off"),
    "dataset": ("synthetic", "digits"),
    "license": ("MIT", "BSD-3-Clause", "Apache-2.0", "none"),
    "language": ("en", "zh"),
}
BOOLEANS = ("github_actions", "pre_commit", "init_git", "exercises")
# The words cookiecutter reads as yes or no on its command line. copier reads any other word as yes
# (`init_git=maybe`), so its validators refuse them, using check_yes_no on the text as typed.
YES_NO = ("1", "true", "t", "yes", "y", "on", "0", "false", "f", "no", "n", "off")

# Names a project must not take beyond the standard library (whose list, sys.stdlib_module_names,
# leaves out `test`): importing the project would shadow these for its own code
# and its users (`import random` would find the project's package instead).
SHADOWED = {
    "torch", "torchvision", "torchaudio", "numpy", "tqdm", "sklearn", "scipy", "pandas",
    "matplotlib", "pytest", "ruff", "setuptools", "pip", "lightning", "test", "tests", "utils", "src",
}


def check_slug(slug: str) -> str | None:
    if not slug:
        return "the package name is empty: give a project name with some ASCII letters, or set project_slug"
    if not (slug.isidentifier() and slug.isascii() and slug == slug.lower()):
        return (f"the package name {slug!r} is not a lower-case Python identifier "
                "(a-z, 0-9, _; not starting with a digit)")
    if len(slug) > PACKAGE_MAX:
        return (f"the package name is {len(slug)} characters long, over the {PACKAGE_MAX} that keep the generated "
                "code's lines within its linter's 120 columns: choose a shorter project_slug")
    if keyword.iskeyword(slug):
        return f"the package name {slug!r} is a Python keyword"
    if slug in sys.stdlib_module_names or slug in SHADOWED:
        return f"the package name {slug!r} would shadow the module {slug!r} that the project or its users import"
    return None


def check_seed(seed: object) -> str | None:
    text = str(seed).strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) > MAX_SEED:
        return f"the seed {seed!r} is not an integer in 0 .. {MAX_SEED}"
    return None


def check_python_version(version: str) -> str | None:
    match = re.fullmatch(r"3\.([0-9]+)", str(version).strip())
    if not match or int(match.group(1)) < MIN_PYTHON_MINOR:
        return f"python_version {version!r} is not 3.{MIN_PYTHON_MINOR} or newer (written as 3.N)"
    return None


def check_choices(context: dict) -> str | None:
    for key, allowed in CHOICES.items():
        if context.get(key) not in allowed:
            return f"{key} {context.get(key)!r} is not one of {', '.join(allowed)}"
    for key in BOOLEANS:
        if not isinstance(context.get(key), bool):
            return f"{key} must be true or false, not {context.get(key)!r} (cookiecutter 2.7+ keeps booleans)"
    return None


def check_yes_no(key: str, value: object) -> str | None:
    if isinstance(value, bool) or str(value).strip().lower() in YES_NO:
        return None
    return f"{key} must be true or false (or yes, no, 1, 0...), not {value!r}"


def check_license_holder(context: dict) -> str | None:
    if context.get("license") != "none" and not str(context.get("author_name", "")).strip():
        return (f"the {context.get('license')} license needs a copyright holder: "
                "set author_name, or choose license 'none'")
    return None


def check_email(email: object) -> str | None:
    text = str(email).strip()
    if text and not re.fullmatch(r"[^@\s]+@[^@\s]+", text):
        return f"author_email {text!r} is not an e-mail address (leave it empty for none)"
    return None


def check_combination(context: dict) -> str | None:
    return check_license_holder(context) or check_email(context.get("author_email", ""))


def check_cookiecutter_version() -> str | None:
    try:
        installed = metadata.version("cookiecutter")
    except metadata.PackageNotFoundError:  # run by another front end (cruft bundles its own)
        return None
    parts = tuple(int(p) for p in re.findall(r"[0-9]+", installed)[:2])
    if parts < MIN_COOKIECUTTER:
        return f"cookiecutter {installed} is too old: this template needs 2.7 or newer (pip install -U cookiecutter)"
    return None


# Each answer's check, keyed by the question it belongs to, in the order the questions are asked.
# copier.yml gives each of these questions a validator that calls local_extensions.refusal with the
# question's name (no braces here: cookiecutter renders this file), so copier refuses a bad answer
# at its own prompt, or its --data value, with the sentence this hook prints.
# The license check sits on `license` because copier asks it after author_name, so both are known.
# CHOICES need no validator there: copier's `choices` refuses any other value before a validator
# would run, as cookiecutter itself does on its command line.
ANSWER_CHECKS = {
    "project_slug": lambda context: check_slug(context["project_slug"]),
    "author_email": lambda context: check_email(context.get("author_email", "")),
    "python_version": lambda context: check_python_version(context["python_version"]),
    "seed": lambda context: check_seed(context["seed"]),
    "license": check_license_holder,
    **{key: (lambda context, key=key: check_yes_no(key, context[key])) for key in BOOLEANS},
}


def validate(context: dict) -> str | None:
    """Returns the first problem found, as one sentence, or None."""
    return (
        check_cookiecutter_version()
        or check_choices(context)
        or next(filter(None, (check(context) for check in ANSWER_CHECKS.values())), None)
    )


def main(context: dict) -> int:
    problem = validate(context)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # cookiecutter renders this file before running it; the raw string holds the context as JSON.
    sys.exit(main(json.loads(r"""{{ cookiecutter|tojson }}""")))
