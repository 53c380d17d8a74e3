"""What each size of the generated project holds, counted the same way for both.

    python scripts/sizes.py            # the table, in Markdown
    python scripts/sizes.py --json F   # and the figures as JSON
    python scripts/sizes.py --readme   # and put the table into README.md in place of the old one

Bakes the template's defaults at each size (scope=research, scope=teaching) into a scratch folder
and counts, in the project as a user gets it:
- source files and lines: src/**/*.py, and of those lines how many are code, how many explain
  (docstrings and comment lines) and how many are blank;
- test lines: tests/**/*.py;
- README words: README.md (and, apart, the words of docs/*.md);
- the package's modules on the call stack when the first optimizer.step() runs, in a run of
  `train.main` on a few samples (a hook of torch's, before every optimizer step, reads the stack);
- the package's own imports in train.py: statements and names.
Standard library, cookiecutter and the project's own dependencies only.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCOPES = ("research", "teaching")
# Run in the baked project: train a few samples, and at the first optimizer step print which of the
# package's modules are on the stack.
ON_THE_STACK = """
import sys, traceback
from pathlib import Path
from torch.optim.optimizer import register_optimizer_step_pre_hook
from {package} import train

package = Path(train.__file__).parent
seen = []

def note(optimizer, args, kwargs):
    if not seen:
        seen.extend(sorted({{Path(frame.filename).relative_to(package).as_posix() for frame in traceback.extract_stack()
                            if Path(frame.filename).is_relative_to(package)}}))

register_optimizer_step_pre_hook(note)
train.main(["--out", sys.argv[1], "--epochs", "1", "--max-samples", "32", "--batch-size", "16", "--device", "cpu"])
print(" ".join(seen))
"""


def lines(paths: list[Path]) -> int:
    return sum(len(path.read_text(encoding="utf-8").splitlines()) for path in paths)


def line_kinds(paths: list[Path]) -> dict[str, int]:
    """The lines of `paths` by kind: docstrings (of modules, classes and functions) and lines that
    hold only a comment explain; blank lines outside docstrings are blank; the rest is code."""
    kinds = {"code": 0, "explaining": 0, "blank": 0}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        explaining = set()
        for node in ast.walk(ast.parse(text)):
            body = getattr(node, "body", None)
            if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                    and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                explaining.update(range(body[0].lineno, body[0].end_lineno + 1))
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and lines[token.start[0] - 1].lstrip().startswith("#"):
                explaining.add(token.start[0])
        blank = {number for number, line in enumerate(lines, 1) if not line.strip()} - explaining
        kinds["explaining"] += len(explaining)
        kinds["blank"] += len(blank)
        kinds["code"] += len(lines) - len(explaining) - len(blank)
    return kinds


def own_imports(train_py: Path, package: str) -> tuple[int, int]:
    """(import statements, names imported) of the package's own modules in train.py."""
    statements = names = 0
    for node in ast.walk(ast.parse(train_py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == package):
            statements, names = statements + 1, names + len(node.names)
    return statements, names


def count(project: Path) -> dict:
    package = project.name
    sources = sorted((project / "src").rglob("*.py"))
    docs = sorted((project / "docs").glob("*.md"))
    with tempfile.TemporaryDirectory() as scratch:
        run = subprocess.run([sys.executable, "-c", ON_THE_STACK.format(package=package), str(Path(scratch) / "run")],
                             capture_output=True, text=True, cwd=project, timeout=600,
                             env={**os.environ, "PYTHONPATH": str(project / "src")})
    if run.returncode != 0:
        raise SystemExit(f"error: the run in {project} failed:\n{run.stderr[-2000:]}")
    on_the_stack = run.stdout.strip().splitlines()[-1].split()
    statements, names = own_imports(project / "src" / package / "train.py", package)
    return {"source_files": len(sources), "source_lines": lines(sources), "source_line_kinds": line_kinds(sources),
            "test_lines": lines(sorted((project / "tests").rglob("*.py"))),
            "readme_words": len((project / "README.md").read_text(encoding="utf-8").split()),
            "docs_words": sum(len(page.read_text(encoding="utf-8").split()) for page in docs),
            "train_py_lines": lines([project / "src" / package / "train.py"]),
            "modules_on_the_stack_at_optimizer_step": on_the_stack,
            "own_import_statements_in_train_py": statements, "own_import_names_in_train_py": names}


def table(figures: dict[str, dict]) -> str:
    rows = [("source files / lines", lambda f: f"{f['source_files']} / {f['source_lines']:,}"),
            ("of those lines: code / docstrings and comments / blank", lambda f: " / ".join(
                f"{f['source_line_kinds'][kind]:,}" for kind in ("code", "explaining", "blank"))),
            ("`train.py` lines", lambda f: f"{f['train_py_lines']}"),
            ("test lines", lambda f: f"{f['test_lines']:,}"),
            ("README words (and `docs/`)", lambda f: f"{f['readme_words']:,}" + (
                f" ({f['docs_words']:,})" if f["docs_words"] else "")),
            ("the package's modules on the stack at `optimizer.step()`",
             lambda f: f"{len(f['modules_on_the_stack_at_optimizer_step'])} (" + ", ".join(
                 f"`{name}`" for name in f["modules_on_the_stack_at_optimizer_step"]) + ")"),
            ("the package's own imports in `train.py`", lambda f: (
                f"{f['own_import_statements_in_train_py']} statements, {f['own_import_names_in_train_py']} names"))]
    out = ["| | research | teaching |", "| --- | --- | --- |"]
    out += [f"| {label} | {show(figures['research'])} | {show(figures['teaching'])} |" for label, show in rows]
    return "\n".join(out)


def bake(folder: Path, scope: str) -> Path:
    """The template's defaults at the size `scope`, baked by cookiecutter's command line."""
    subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(folder / scope), str(ROOT),
                    f"scope={scope}", "init_git=no"], check=True, capture_output=True)
    return folder / scope / "my_project"


def measure() -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as scratch:
        return {scope: count(bake(Path(scratch), scope)) for scope in SCOPES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--readme", action="store_true", help="also replace the table in README.md")
    args = parser.parse_args()
    figures = measure()
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    if args.readme:
        replace_in_readme(ROOT / "README.md", table(figures))
    return 0


def replace_in_readme(readme: Path, new: str) -> None:
    """Put `new` where the README's table of the two sizes is: from its header row to the first line
    that is not a table row."""
    lines = readme.read_text(encoding="utf-8").split("\n")
    start = lines.index(new.split("\n")[0])  # the header row, "| | research | teaching |"
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    lines[start:end] = new.split("\n")
    readme.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
