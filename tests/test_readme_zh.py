"""Each Chinese page of a generated project (language=zh) is the English one in Chinese: the same
document, section for section. The pages: both sizes' README.md and the research size's docs/*.md.

Both files are read as templates, unbaked. What a reader copies (headings' places, tables' rows,
code blocks, commands, flags, paths, Jinja) must match the English file; the prose must be Chinese.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import GENERATED_README, TEACHING_README, TEMPLATE_DIR

DOCS = TEMPLATE_DIR / "docs"
PAGES = {"research README": (GENERATED_README["en"], GENERATED_README["zh"]),
         "teaching README": (TEACHING_README["en"], TEACHING_README["zh"]),
         **{f"docs/{path.name.split('%}')[1].split('{%')[0]}": (path, DOCS / path.name.replace("'en'", "'zh'"))
            for path in sorted(DOCS.glob("*cookiecutter.language == 'en'*"))},
         "exercises/ANSWERS.md": tuple(TEMPLATE_DIR / "exercises" / f"{{% if cookiecutter.language == '{language}' %}}"
                                       "ANSWERS.md{% endif %}" for language in ("en", "zh"))}

FENCE = re.compile(r"^(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})\s+\S")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
FIGURE = re.compile(r"\d+(?:[.\-]\d+)*")  # a number, a date or a range: 0.88, 2026-12-01, 5-7
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)[^)]*\)")
JINJA_EXPRESSION = re.compile(r"\{\{.*?\}\}", re.S)
JINJA_STATEMENT = re.compile(r"\{%.*?%\}", re.S)
JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)
HTML_ENTITY = re.compile(r"&[A-Za-z]+;|&#\d+;")
COMMAND_START = ("python -m", "python ", "pip ", "pytest", "torchrun", "--", "sbatch", "srun", "git ", "tensorboard ")
FILE_SUFFIX = re.compile(r"\.(py|json|csv|pt|png|md|toml|sbatch|npz)\b")


class Readme:
    """A Markdown file split into fenced code blocks and everything else (the prose lines)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.code_blocks: list[str] = []
        self.prose_lines: list[str] = []
        fence, block = None, []
        for line in text.splitlines():
            if fence is None:
                opening = FENCE.match(line)
                if opening:
                    fence, block = opening.group(1), [line]
                else:
                    self.prose_lines.append(line)
            else:
                block.append(line)
                if line.strip() == fence:  # a closing fence has no info string
                    self.code_blocks.append("\n".join(block))
                    fence = None
        assert fence is None, "a code block is never closed"

    @property
    def prose(self) -> str:
        return "\n".join(self.prose_lines)

    def heading_levels(self) -> list[int]:
        return [len(m.group(1)) for line in self.prose_lines if (m := HEADING.match(line))]

    def tables(self) -> list[tuple[int, int]]:
        """(columns, body rows) of each table, in order; the delimiter row is not counted."""
        found, rows = [], []
        for line in [*self.prose_lines, ""]:
            if line.lstrip().startswith("|"):
                rows.append(line.strip())
                continue
            if rows:
                assert len(rows) >= 2 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", rows[1]), rows[:2]
                found.append((rows[1].count("|") - 1, len(rows) - 2))
                rows = []
        return found

    def sections(self) -> list[tuple[str, str]]:
        """(heading line, the prose under it up to the next heading), in order."""
        found: list[tuple[str, list[str]]] = [("", [])]
        for line in self.prose_lines:
            if HEADING.match(line):
                found.append((line, []))
            else:
                found[-1][1].append(line)
        return [(heading, "\n".join(body)) for heading, body in found]

    def inline_code(self) -> list[str]:
        """The inline code spans of the prose, whitespace inside each collapsed as Markdown does."""
        return [" ".join(m.group(2).split()) for m in INLINE_CODE.finditer(self.prose)]

    def letters_of_prose(self) -> str:
        """The letters a reader reads as words: no code, no links, no Jinja, no HTML entities."""
        text = INLINE_CODE.sub(" ", self.prose)
        text = LINK.sub(" ", text)
        for pattern in (JINJA_EXPRESSION, JINJA_STATEMENT, JINJA_COMMENT, HTML_ENTITY):
            text = pattern.sub(" ", text)
        return "".join(ch for ch in text if ch.isalpha())


def looks_like_command_flag_or_path(span: str) -> bool:
    return span.startswith(COMMAND_START) or "/" in span or FILE_SUFFIX.search(span) is not None


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF
            or 0x20000 <= code <= 0x2FA1F)


@pytest.fixture(scope="module", params=list(PAGES))
def page(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def en(page) -> Readme:
    return Readme(PAGES[page][0].read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def zh(page) -> Readme:
    return Readme(PAGES[page][1].read_text(encoding="utf-8"))


def test_every_english_page_has_a_chinese_one():
    assert len(PAGES) >= 9 and all(zh.is_file() for _, zh in PAGES.values())


def test_the_chinese_readme_has_the_same_headings_at_each_level_in_the_same_order(en, zh):
    assert Counter(zh.heading_levels()) == Counter(en.heading_levels())
    assert zh.heading_levels() == en.heading_levels()


def test_the_chinese_readme_has_the_same_tables_with_the_same_rows(en, zh):
    assert zh.tables() == en.tables()


def test_the_chinese_readme_has_the_same_code_blocks_byte_for_byte(en, zh):
    assert zh.code_blocks == en.code_blocks


def test_the_pages_that_are_read_most_have_tables_and_code_the_parser_finds(page, en):
    """The negative control of the comparisons above: they would pass on two empty lists."""
    if "README" in page:
        assert en.tables() and en.code_blocks, page


def test_every_command_flag_and_path_of_the_english_readme_is_in_the_chinese_one(en, zh):
    wanted = {span for span in en.inline_code() if looks_like_command_flag_or_path(span)}
    assert sorted(wanted - set(zh.inline_code())) == []


def test_every_inline_code_span_of_the_english_readme_is_in_the_chinese_one(en, zh):
    """API names (`DataLoader`, `GradScaler`, ...) and values stay as they are, untranslated."""
    assert sorted(set(en.inline_code()) - set(zh.inline_code())) == []


def test_the_chinese_readme_keeps_the_jinja_of_the_english_one(en, zh):
    """The same statements in the same order (the same text is chosen), the same expressions as often."""
    assert JINJA_STATEMENT.findall(zh.text) == JINJA_STATEMENT.findall(en.text)
    assert Counter(JINJA_EXPRESSION.findall(zh.text)) == Counter(JINJA_EXPRESSION.findall(en.text))


def test_the_chinese_readme_keeps_the_links_of_the_english_one(en, zh):
    """The same pages and files; an anchor is a heading's, so it is in the page's language."""
    targets = {m.group(2).split("#")[0] for m in LINK.finditer(en.prose)}
    assert targets <= {m.group(2).split("#")[0] for m in LINK.finditer(zh.prose)}


def test_the_chinese_readme_prose_is_mostly_chinese(zh):
    letters = zh.letters_of_prose()
    cjk = sum(map(is_cjk, letters))
    assert cjk > len(letters) / 2, f"{cjk} of {len(letters)} letters of prose are CJK"


@pytest.mark.parametrize("page_with_myths", ["teaching README", "docs/reproducibility.md"])
def test_the_chinese_myths_section_answers_the_folklore_that_chinese_blogs_repeat(page_with_myths):
    en, zh = (Readme(path.read_text(encoding="utf-8")) for path in PAGES[page_with_myths])
    headings = [heading.lstrip("#").strip() for heading, _ in en.sections()]
    myths = zh.sections()[headings.index("Myths, corrected")][1]
    for folklore in ("torch.backends.cudnn.enabled = False", "os.environ['PYTHONHASHSEED']",
                     "model.cuda('cuda:1,2')", "CUDA_VISIBLE_DEVICES", "criterion.to(device)", "相同种子"):
        assert folklore in myths, folklore


def test_the_chinese_pages_give_the_english_figures_section_by_section(en, zh):
    """Measurements (dates, versions, seconds, accuracies, ratios) are the English file's, in the same section."""
    for (heading, english), (_, chinese) in zip(en.sections(), zh.sections(), strict=True):
        english, chinese = (INLINE_CODE.sub(" ", JINJA_EXPRESSION.sub(" ", LINK.sub(" ", text)))
                            for text in (english, chinese))
        assert set(FIGURE.findall(chinese)) == set(FIGURE.findall(english)), heading


CJK_CHARACTER = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef]")
SENTENCE_END = "。！？"
NOT_A_PARAGRAPH = re.compile(r"\s*([#|>`]|[-*] |\d+\. |Caught |<)")


def lines_wrapped_inside_a_sentence(text: str) -> list[str]:
    """The lines of prose that a sentence continues on the next line, where either side is Chinese:
    a renderer joins them with a space, which Chinese does not have. A line ending a sentence, a
    line of Jinja, a heading, a table row, a list item's first line and code are left alone."""
    lines, found, fence = text.splitlines(), [], False
    for line, following in zip(lines, lines[1:], strict=False):
        fence = fence != bool(FENCE.match(line))
        if fence or not line.strip() or not following.strip() or "{%" in line + following:
            continue
        if NOT_A_PARAGRAPH.match(line) or NOT_A_PARAGRAPH.match(following) or line.rstrip()[-1] in SENTENCE_END:
            continue
        if CJK_CHARACTER.match(line.rstrip()[-1]) or CJK_CHARACTER.match(following.lstrip()[0]):
            found.append(line)
    return found


ZH_PAGES = sorted({*(zh for _, zh in PAGES.values()), *TEMPLATE_DIR.glob("exercises/*/*'zh'*README.md*"),
                   *TEMPLATE_DIR.glob("exercises/*'zh'*README.md*")})


@pytest.mark.parametrize("page", ZH_PAGES, ids=[str(path.relative_to(TEMPLATE_DIR)) for path in ZH_PAGES])
def test_no_chinese_page_breaks_a_line_inside_a_sentence(page):
    assert lines_wrapped_inside_a_sentence(page.read_text(encoding="utf-8")) == []


def test_a_line_broken_inside_a_chinese_sentence_is_found():
    assert lines_wrapped_inside_a_sentence("训练本身没有变化，\n变化的是比较能看到什么。\n") == ["训练本身没有变化，"]
    assert lines_wrapped_inside_a_sentence("第一句。\n第二句。\n```\n代码，\n代码\n```\n") == []


def test_no_template_file_that_holds_jinja_is_taken_for_binary():
    """cookiecutter copies a file that binaryornot takes for binary as it is, Jinja and all: a Chinese
    page whose first bytes end inside a character can be taken so, after an edit that moved them."""
    from binaryornot.check import is_binary

    for path in TEMPLATE_DIR.rglob("*"):
        if path.is_file() and ".png" not in path.name:
            text = path.read_text(encoding="utf-8", errors="replace")
            if "{{" in text or "{%" in text:
                assert not is_binary(str(path)), f"{path.relative_to(TEMPLATE_DIR)} would be copied unrendered"
