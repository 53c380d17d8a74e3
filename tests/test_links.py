"""Every link and section reference in the READMEs resolves: no dead end, in either language.

Checked: the template README, and in a project baked in each language and each size (exercises
included) its README, its docs/ pages, exercises/README.md and each exercise's README. A link to a
file or folder must name one that exists in the baked project (a folder shows its README on
GitHub); a `#anchor` must be the anchor GitHub makes of one of the target's headings; a section
named in prose ('see "Resuming"', '见下文“断点续训”') must be a heading of the same file. Web links
are not followed (no network). Each file is its own test, named by its path, so a failure says
which file and which links.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from conftest import ROOT, cookiecutter_cli, post_gen

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"\[(?:[^\]]|\][^(])*?\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # pictures too: ![...](...)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# A section named in prose: English 'see "X"', '"X" below/above' or '(see X)'; Chinese 见“X” or “X”一节.
SECTION_REFERENCES = (
    re.compile(r"\b[Ss]ee \"([^\"]+)\""), re.compile(r"\"([^\"]+)\" (?:below|above)\b"),
    re.compile(r"\(see ([A-Z][A-Za-z ]*)\)"),
    re.compile(r"见(?:下文|上文|后文|前文)?“([^”]+)”"), re.compile(r"“([^”]+)”(?:一节|这一节|小节)"),
)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text as shown (no code ticks, link targets or emphasis),
    lower case, every character that is not a letter, digit, mark, space, `-` or `_` dropped (CJK
    characters are letters and stay), each space a `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"[`*]|<[^>]+>", "", text).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        anchor = github_anchor(heading)
        found.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return found


def headings(text: str) -> list[str]:
    return [re.sub(r"[`*]", "", heading) for heading in HEADING.findall(FENCE.sub("", text))]


def dead_ends(path: Path, top: Path) -> list[str]:
    """Each link or section reference of the Markdown file `path` that does not resolve inside `top`."""
    text = path.read_text(encoding="utf-8")
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    problems = []
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not followed here
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if top not in (linked, *linked.parents) or not linked.exists():
            problems.append(f"{target}: no such file or folder")
            continue
        if anchor:
            page = linked / "README.md" if linked.is_dir() else linked
            if not page.is_file() or anchor not in anchors(page.read_text(encoding="utf-8")):
                problems.append(f"{target}: no heading of {page.name} has the anchor #{anchor}")
    names = headings(text)
    for pattern in SECTION_REFERENCES:
        for section in pattern.findall(re.sub(r"\s+", " ", prose)):
            if not any(name == section or name.startswith(f"{section},") or name.startswith(f"{section}（")
                       or name.startswith(f"{section} ") for name in names):
                problems.append(f'section "{section}": no heading of {path.name} is named so')
    return problems


SCOPES = ("research", "teaching")


def baked(tmp_path_factory, language: str, scope: str) -> Path:
    out = tmp_path_factory.mktemp(f"links_{language}_{scope}")
    result = cookiecutter_cli(out, f"language={language}", f"scope={scope}", "exercises=yes", "init_git=no")
    assert result.returncode == 0, result.stderr
    return out / "my_project"


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[tuple[str, str], Path]:
    return {(language, scope): baked(tmp_path_factory, language, scope)
            for language in ("en", "zh") for scope in SCOPES}


def markdown_files() -> list[tuple[str, str, str]]:
    """(language, size, path inside the project) of each Markdown page a baked project has: every
    template file named for a language (README.md, docs/*.md) that the size keeps."""
    template = ROOT / "{{cookiecutter.project_slug}}"
    files = []
    for language in ("en", "zh"):
        for source in sorted(template.rglob(f"*cookiecutter.language == '{language}'*.md{{% endif %}}")):
            name = source.name.split("%}", 1)[1].split("{%", 1)[0]
            relative = (source.parent.relative_to(template) / name).as_posix()
            for scope in SCOPES:
                if f"cookiecutter.scope == '{scope}'" in source.name or "cookiecutter.scope" not in source.name:
                    if not any(relative == path or relative.startswith(f"{path}/") for path in post_gen.paths_to_remove(
                            {"scope": scope, "project_slug": "my_project", "license": "MIT", "github_actions": True,
                             "pre_commit": True, "exercises": True})):
                        files.append((language, scope, relative))
    return files


def test_the_template_readme_has_no_dead_end():
    assert dead_ends(ROOT / "README.md", ROOT) == []


@pytest.mark.parametrize("language, scope, relative", markdown_files(),
                         ids=[f"{language}:{scope}:{relative}" for language, scope, relative in markdown_files()])
def test_each_baked_readme_has_no_dead_end(language, scope, relative, projects):
    project = projects[language, scope]
    assert dead_ends(project / relative, project) == []


def test_every_docs_page_is_linked_from_the_readme_in_both_languages(projects):
    for (language, scope), project in projects.items():
        readme = (project / "README.md").read_text(encoding="utf-8")
        pages = sorted(path.name for path in (project / "docs").glob("*.md")) if scope == "research" else []
        assert pages or scope == "teaching", (language, scope)
        for page in pages:
            assert f"](docs/{page})" in readme, (language, page)


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("scope", SCOPES)
def test_the_section_the_bakes_closing_message_names_is_a_heading_of_the_readme(language, scope, projects):
    text = (projects[language, scope] / "README.md").read_text(encoding="utf-8")
    assert post_gen.QUICK_START[language] in headings(text)


def test_the_anchors_follow_githubs_rules_for_english_and_chinese_headings():
    assert github_anchor("Proof matrix") == "proof-matrix"
    assert github_anchor("Several GPUs and nodes (torchrun)") == "several-gpus-and-nodes-torchrun"
    assert github_anchor("Mixed precision and `torch.compile`") == "mixed-precision-and-torchcompile"
    assert github_anchor("证明矩阵") == "证明矩阵"
    assert github_anchor("多 GPU 与多节点（torchrun）") == "多-gpu-与多节点torchrun"
    assert github_anchor("多种子实验：一条命令跑多个种子") == "多种子实验一条命令跑多个种子"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1", "a-2"}


def test_a_dead_link_a_missing_anchor_and_a_missing_section_are_each_found(tmp_path):
    """The negative control: each kind of dead end, in a file that has them."""
    (tmp_path / "other.md").write_text("# Elsewhere\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text('# Top\n\n[a](missing.md) [b](other.md#nowhere) [c](#top) [d](other.md#elsewhere)\n'
                    'See "Nowhere" for more (see Elsewhere); `[e](in-code.md)` is code.\n见下文“不存在”。\n',
               encoding="utf-8")
    assert dead_ends(page, tmp_path) == [
        "missing.md: no such file or folder", "other.md#nowhere: no heading of other.md has the anchor #nowhere",
        'section "Nowhere": no heading of README.md is named so',
        'section "Elsewhere": no heading of README.md is named so',
        'section "不存在": no heading of README.md is named so',
    ]
