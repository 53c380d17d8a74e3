"""Jinja filters and functions for this template, loaded by cookiecutter (cookiecutter.json's
`_extensions`) and by copier (copier.yml's `_jinja_extensions`, through copier-template-extensions,
since copier does not put the template's folder on the import path).

- `identifier`: derives the package name from the project name: lower case, and every run of
  characters other than a-z and 0-9 becomes one `_`. `O'Brien "Quoted" 项目` -> `o_brien_quoted`.
  Accents are stripped first (`Ünïcode` -> `unicode`). A name with no ASCII letter or digit left
  (`项目`) gives `project`, which the prompt offers to change.
  (cookiecutter's own `slugify` transliterates, turning 项目 into `xiang_mu`; we do not guess.)
  The result is never a name the pre-generation hook refuses, so that the defaults always bake:
  a name that is a keyword or would shadow a module gets `_project` added (`Random` ->
  `random_project`, not `random`), one that starts with a digit gets `project_` in front
  (`3D Model` -> `project_3d_model`), and a very long one is cut to what a folder name may hold.
  A package name typed as an answer is checked as typed.
- `tojson`: replaces Jinja's `tojson`, which escapes every non-ASCII character (`\\u9879`) and
  HTML-escapes quotes. Ours keeps text readable and yields a double-quoted literal that is valid
  in Python, TOML and YAML alike: JSON escapes quotes, backslashes and control characters, and
  DEL, which TOML forbids raw, is escaped too.
- `template_page`: the web page of the template a project was made from, for the generated README's
  first line (see the function).
- `utc_year()`: the year for LICENSE; a function of ours rather than cookiecutter's `{% now %}`
  tag, so that copier, which lacks that tag, derives `__year` from the same cookiecutter.json line.
- `refusal(question)`: for copier's validators: the pre-generation hook's sentence for the answer
  to `question` (hooks/pre_gen_project.py's ANSWER_CHECKS), or "" when the answer is good.
- `paths_to_remove(answers)`: for copier's `_exclude`: the post-generation hook's own list of the
  files that the options turn off.
- `absolute_source`: for copier's answers file: the template's path made absolute (see the function).
"""

import datetime
import importlib.util
import json
import re
import sys
import unicodedata
from pathlib import Path

from jinja2 import pass_context
from jinja2.ext import Extension

HOOKS = Path(__file__).resolve().parent / "hooks"


def load_module(name: str, path: Path):
    """Imports a file by its path, as module `name`: the one way the template's tools do it (the
    hooks, scripts/breaks.py), since neither folder is a package on the import path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load_hook(name: str):
    """A hook as a module: its checks are plain functions, its template line sits under __main__."""
    return load_module(f"repro_template_{name}", HOOKS / f"{name}.py")


PRE_GEN = load_hook("pre_gen_project")


def identifier(name: str) -> str:
    # Accents come off first (Ünïcode -> Unicode), so that such letters are kept, not dropped.
    plain = "".join(c for c in unicodedata.normalize("NFKD", str(name)) if not unicodedata.combining(c))
    slug = re.sub(r"[^a-z0-9]+", "_", plain.lower()).strip("_") or "project"
    if slug[0].isdigit():  # `3d_model` is no identifier
        slug = f"project_{slug}"
    slug = slug[: PRE_GEN.PACKAGE_MAX].rstrip("_")  # the longest package name the hook takes
    # The hook's own check: a keyword, or a module the project or its users import (`random`).
    return f"{slug[: PRE_GEN.PACKAGE_MAX - len('_project')].rstrip('_')}_project" if PRE_GEN.check_slug(slug) else slug


# The abbreviations cookiecutter, cruft and copier expand to a repository's address.
SHORTCUTS = {"gh": "https://github.com/", "gl": "https://gitlab.com/", "bb": "https://bitbucket.org/"}


def template_page(source: object, published: object = "") -> str:
    """The web page of the template a project was made from: `source` as the user gave it to
    cookiecutter or cruft (`_template`) or copier (`_src_path`), when it is a web address
    (`gh:owner/name`, an https URL, `git@host:owner/name.git`); else `published` (cookiecutter.json's
    `__template_url`, the template's own address once it is published); else "". A local path is
    not a link anyone else can follow, and a user name or token in a URL is not written down."""
    text = str(source).strip()
    shortcut, _, rest = text.partition(":")
    ssh = re.fullmatch(r"(?:ssh://)?git@([^:/]+)[:/](.+)", text)
    if shortcut in SHORTCUTS and rest and not rest.startswith("/"):
        page = SHORTCUTS[shortcut] + rest
    elif re.match(r"(git\+)?https?://", text):
        page = re.sub(r"^git\+|(?<=//)[^/@]*@", "", text)
    elif ssh:
        page = f"https://{ssh.group(1)}/{ssh.group(2)}"
    else:
        return str(published).strip()
    return page.rstrip("/").removesuffix(".git")


def tojson(value: object) -> str:
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def utc_year() -> str:
    return str(datetime.datetime.now(datetime.timezone.utc).year)


def absolute_source(answers: dict) -> dict:
    """copier's answers, with `_src_path` made absolute when it names a folder here by a relative
    path. copier records the path as typed (`copier copy repro-template my_project`), and `copier
    update`, typed inside the project, looks for it from there and stops ("Updating is only
    supported in git-tracked templates"). cruft records the absolute path itself. A URL
    (`gh:org/repro-template`, `https://...`, `git@...`) and an absolute path are kept as they are."""
    source = answers.get("_src_path")
    if isinstance(source, str) and source and not Path(source).is_absolute() and Path(source).is_dir():
        return {**answers, "_src_path": str(Path(source).resolve())}
    return answers


class Filters(Extension):
    """Registers the filters and functions; named in cookiecutter.json and copier.yml."""

    def __init__(self, environment):
        super().__init__(environment)
        pre_gen, post_gen = PRE_GEN, load_hook("post_gen_project")

        @pass_context
        def refusal(context, question: str) -> str:
            # copier renders a validator with every answer given so far, the one being checked
            # included, but that one already cast to the question's type: a yes/no typed as `maybe`
            # arrives as True. So the check reads an answer given with --data as it was typed.
            answers = dict(context.get_all())
            given = answers.get("_copier_conf", {}).get("data", {})
            if question in given:
                answers[question] = given[question]
            return pre_gen.ANSWER_CHECKS[question](answers) or ""

        environment.filters["identifier"] = identifier
        environment.filters["tojson"] = tojson
        environment.filters["template_page"] = template_page
        environment.filters["absolute_source"] = absolute_source
        environment.globals["utc_year"] = utc_year
        environment.globals["refusal"] = refusal
        environment.globals["paths_to_remove"] = post_gen.paths_to_remove
