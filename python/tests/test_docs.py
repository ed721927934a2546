"""The user guide stays readable: short sentences and table cells, and glossary links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
MOST_WORDS = 40


def cells_and_sentences(markdown: str) -> tuple[list[str], list[str]]:
    """The table cells, and the sentences of the prose (each list item and paragraph apart), without
    code blocks, comments and headings; a link counts as its text."""
    markdown = re.sub(r"```.*?```|<!--.*?-->", "", markdown, flags=re.S)
    cells: list[str] = []
    blocks: list[str] = []
    current: list[str] = []
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells += [cell.strip() for cell in line.strip().strip("|").split("|")]
            continue
        item = re.match(r"\s*(?:[-*]|\d+\.)\s+(.*)", line)
        if item or not line.strip() or line.startswith("#"):
            if current:
                blocks.append(" ".join(current))
            current = [item.group(1)] if item else []
            continue
        current.append(line.strip())
    if current:
        blocks.append(" ".join(current))
    sentences = [
        sentence
        for block in blocks
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`*\"(])", re.sub(r"\]\([^)]*\)", "]", block))
    ]
    return cells, sentences


def test_no_sentence_or_table_cell_of_the_user_guide_runs_over_40_words() -> None:
    cells, sentences = cells_and_sentences((DOCS / "user-guide.md").read_text())
    assert len(sentences) > 300, "the splitter found too few sentences: it no longer reads the guide"
    too_long = [text for text in cells + sentences if len(text.split()) > MOST_WORDS]
    assert not too_long, f"{len(too_long)} over {MOST_WORDS} words: {too_long[:3]}"


def test_a_long_sentence_is_found() -> None:
    sentence = " ".join(["Word"] + ["word"] * MOST_WORDS) + "."
    _, sentences = cells_and_sentences(f"Short one. {sentence}\n\n- An item.\n")
    assert [len(s.split()) for s in sentences] == [2, MOST_WORDS + 1, 2]


def test_every_glossary_link_of_the_user_guide_names_a_term_the_glossary_defines() -> None:
    terms = set(re.findall(r'<a id="(term-[a-z-]+)"></a>', (DOCS / "architecture.md").read_text()))
    linked = set(re.findall(r"architecture\.md#(term-[a-z-]+)", (DOCS / "user-guide.md").read_text()))
    assert linked, "the guide links no glossary term"
    assert linked <= terms, f"not in the glossary: {sorted(linked - terms)}"
