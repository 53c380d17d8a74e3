"""Removes the files that the chosen options turned off, then prints the next steps.

Standard library only, and safe to run twice (cruft runs it again on update): it only deletes
the named paths inside the new project, and only when they exist.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def paths_to_remove(context: dict) -> list[str]:
    remove = []
    if context["license"] == "none":
        remove.append("LICENSE")
    if not context["github_actions"]:
        remove.append(".github")
    if not context["pre_commit"]:
        remove.append(".pre-commit-config.yaml")
    return remove


def prune(project_dir: Path, context: dict) -> None:
    for relative in paths_to_remove(context):
        path = project_dir / relative
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def next_steps(context: dict) -> str:
    slug = context["project_slug"]
    return "\n".join([
        f"Created {slug}/. Next:",
        f"  cd {slug}",
        '  python -m pip install -e ".[dev]"',
        f"  python -m {slug}.train --out runs/a",
        f"  python -m {slug}.train --out runs/b   # same weights_sha256 as runs/a",
        "  pytest",
    ])


def main(context: dict) -> int:
    prune(Path.cwd(), context)  # cookiecutter runs this hook inside the new project
    print(next_steps(context))
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(r"""{{ cookiecutter|tojson }}""")))
