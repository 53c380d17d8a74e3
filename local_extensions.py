"""Jinja filters for this template (cookiecutter loads them through `_extensions`).

- `identifier`: derives the package name from the project name: lower case, and every run of
  characters other than a-z and 0-9 becomes one `_`. `O'Brien "Quoted" 项目` -> `o_brien_quoted`.
  Accents are stripped first (`Ünïcode` -> `unicode`). A name with no ASCII letter or digit left
  (`项目`) gives `project`, which the prompt offers to change.
  (cookiecutter's own `slugify` transliterates, turning 项目 into `xiang_mu`; we do not guess.)
- `tojson`: replaces Jinja's `tojson`, which escapes every non-ASCII character (`\\u9879`) and
  HTML-escapes quotes. Ours keeps text readable and yields a double-quoted literal that is valid
  in Python, TOML and YAML alike: JSON escapes quotes, backslashes and control characters, and
  DEL, which TOML forbids raw, is escaped too.
"""

import json
import re
import unicodedata

from jinja2.ext import Extension


def identifier(name: str) -> str:
    # Accents come off first (Ünïcode -> Unicode), so that such letters are kept, not dropped.
    plain = "".join(c for c in unicodedata.normalize("NFKD", str(name)) if not unicodedata.combining(c))
    return re.sub(r"[^a-z0-9]+", "_", plain.lower()).strip("_") or "project"


def tojson(value: object) -> str:
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


class Filters(Extension):
    """Registers both filters; named in cookiecutter.json's `_extensions`."""

    def __init__(self, environment):
        super().__init__(environment)
        environment.filters["identifier"] = identifier
        environment.filters["tojson"] = tojson
