"""Markdown exports show what people and files wrote as written, and keep only the answers' safe Markdown."""

from __future__ import annotations

import pytest

from framewise.core.markdown_text import code_span, escape_text, safe_answer


@pytest.mark.parametrize(
    ("typed", "written"),
    [
        ("<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
        ('<a href="javascript:alert(1)">here</a>', '&lt;a href="javascript:alert(1)"&gt;here&lt;/a&gt;'),
        ("[click](file:///etc/passwd)", r"\[click\](file\:///etc/passwd)"),
        ("typed &lt;b&gt;", "typed &amp;lt;b&amp;gt;"),
        ("# Title <b>bold</b>", r"\# Title &lt;b&gt;bold&lt;/b&gt;"),
        ("**not bold** _nor this_ `nor code` ~~struck~~ a|b", r"\*\*not bold\*\* \_nor this\_ \`nor code\` \~\~struck\~\~ a\|b"),
        ("see https://example.com or www.example.com", r"see https\://example.com or www\.example.com"),
        ("first\n    1. second\n---\n> third", "first  \n1\\. second  \n\\---  \n&gt; third"),
    ],
)
def test_text_people_and_files_wrote_is_escaped_to_show_as_typed(typed: str, written: str) -> None:
    assert escape_text(typed) == written


@pytest.mark.parametrize(
    ("name", "span"),
    [
        ("clip.mp4", "`clip.mp4`"),
        ("<b>a</b>_b.mp4", "`<b>a</b>_b.mp4`"),
        ("a`b``c.mp4", "```a`b``c.mp4```"),
        ("`quoted`.mp4", "`` `quoted`.mp4 ``"),
        ("two\nlines.mp4", "`two lines.mp4`"),
    ],
)
def test_a_name_is_inline_code_that_nothing_inside_can_close(name: str, span: str) -> None:
    assert code_span(name) == span


def test_an_answer_keeps_its_safe_markdown() -> None:
    answer = "**Red**, then _blue_.\n\n- one\n- two\n\n## Where\n\n`code` and [the docs](https://example.com/a?b=1&c=2)."
    assert safe_answer(answer) == answer


@pytest.mark.parametrize(
    ("answer", "safe"),
    [
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("[x](javascript:alert(1))", r"[x\](javascript:alert(1))"),
        ("[x](file:///etc/passwd) [y](data:text/html,hi)", r"[x\](file:///etc/passwd) [y\](data:text/html,hi)"),
        ("[x]( https://spaced.example)", r"[x\]( https://spaced.example)"),
        ('[x](https://example.com "title")', r'[x\](https://example.com "title")'),
        ("![pixel](https://tracker.example/p.png)", r"!\[pixel](https://tracker.example/p.png)"),
        ("[x][ref]\n\n[ref]: javascript:alert(1)", "[x][ref]\n\n[ref\\]: javascript:alert(1)"),
        ("<https://example.com>", "&lt;https://example.com&gt;"),
        ("an escaped backslash \\\\](javascript:x)", "an escaped backslash \\\\\\](javascript:x)"),
        ("already \\](javascript:x) and \\![text]", "already \\](javascript:x) and \\![text]"),
        ("typed &lt;b&gt;", "typed &amp;lt;b&amp;gt;"),
    ],
)
def test_an_answer_loses_html_pictures_and_links_that_are_not_http(answer: str, safe: str) -> None:
    assert safe_answer(answer) == safe


def test_a_code_fence_an_answer_leaves_open_is_closed() -> None:
    assert safe_answer("Here:\n```python\nx = 1") == "Here:\n```python\nx = 1\n```"
    assert safe_answer("~~~~\nx\n~~~\n") == "~~~~\nx\n~~~\n\n~~~~"
    closed = "```\nx\n```\nafter"
    assert safe_answer(closed) == closed
