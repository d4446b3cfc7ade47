"""The Markdown export read by a real CommonMark + GitHub reader (Qt's, md4c, which also takes the raw
HTML in Markdown): hostile questions, names and answers make no picture, no link but http(s) (and the
mail addresses the reader links by itself), and what people and files wrote reads as they wrote it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtGui import QTextDocument

from framewise.core.conversation import Conversation, Turn
from framewise.core.markdown_text import code_span, escape_text, safe_answer
from framewise.core.settings import AppSettings

HOSTILE = (
    '<img src=x onerror=alert(1)> <a href="javascript:alert(1)">here</a> [click](file:///etc/passwd) typed &lt;b&gt;'
)
# Pieces of hostile Markdown, joined at random by the property tests below.
PIECES = [*"ab <>&;#*_`[]()!:/\\-+=|~.1@\n\t\"'", "javascript:", "file:", "http://", "https://x", "www.", "a@b.co",
          "&lt;", "<img src=x>", "```", "    ", "](", "]:", "![", "<a href='javascript:x'>"]


def _read(markdown: str) -> QTextDocument:
    document = QTextDocument()
    document.setMarkdown(markdown)
    return document


def _links_and_pictures(document: QTextDocument) -> tuple[list[str], bool]:
    html = document.toHtml()
    return re.findall(r'href="([^"]*)"', html), "<img" in html


def _as_shown(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u2028", " ")).strip()


def test_a_hostile_conversation_exports_as_text_with_only_http_links(qapp) -> None:
    name = "<b>x</b>_[a](javascript:b).mp4"
    answer = "**Red**. [docs](https://example.com/a?b=1&c=2) [x](javascript:alert(1)) ![p](https://t.example/p.png) <i>x</i>"
    conversation = Conversation(name, f"/clips/{name}", [
        Turn(HOSTILE, "demo", "label <i>x</i>", answer=answer, status="done"),
        Turn("# heading <b>bold</b>", "demo", None, status="failed", error="No file at <img src=x>"),
    ])
    document = _read(conversation.to_markdown(AppSettings()))
    links, pictures = _links_and_pictures(document)
    assert "https://example.com/a?b=1&amp;c=2" in links and not pictures
    assert all(link.startswith("https://") for link in links), links
    shown = document.toPlainText()
    for written in (HOSTILE, name, f"/clips/{name}", "label <i>x</i>", "# heading <b>bold</b>", "No file at <img src=x>"):
        assert written in shown, written
    assert "Red" in shown and "**Red**" not in shown, "the answer's own emphasis is kept"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=20).map("".join))
def test_any_text_people_or_files_write_reads_as_written(qapp, text: str) -> None:
    assert _as_shown(_read(escape_text(text)).toPlainText()) == _as_shown(text)
    assert _as_shown(_read(code_span(text)).toPlainText()) == _as_shown(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=20).map("".join))
def test_no_answer_makes_a_picture_or_a_link_but_http(qapp, text: str) -> None:
    links, pictures = _links_and_pictures(_read(safe_answer(text)))
    assert not pictures
    assert all(link.lower().startswith(("http://", "https://", "mailto:")) for link in links), links
