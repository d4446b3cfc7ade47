"""Text put into a Markdown export so that every Markdown viewer shows it as written.

Two kinds of text go into an export, treated differently:

* **What people and files wrote** (questions, file names and paths, model names and labels, error
  messages): shown exactly as typed. :func:`escape_text` turns ``&``, ``<`` and ``>`` into entities
  (every Markdown flavour reads those, so a typed ``&lt;b&gt;`` stays ``&lt;b&gt;`` and ``<img …>``
  stays text) and puts a backslash before the characters that would start emphasis, code, links,
  tables or, at a line's start, headings, quotes and lists. :func:`code_span` shows a name or path as
  inline code, with a fence of backticks no run inside it can close.
* **The model's answers**: their Markdown is kept where it is safe. :func:`safe_answer` keeps
  emphasis, lists, headings, code and links to ``http://`` or ``https://`` addresses; it shows raw HTML
  as text (``&``, ``<`` and ``>`` as entities, inside code too, where a viewer then shows the entity),
  pictures as text (a viewer would fetch them), and links to any other scheme (``javascript:``,
  ``file:``, ``data:``) and link definitions as text. A code fence the answer leaves open is closed,
  so the rest of the export stays outside it.

The JSON export keeps every text verbatim; it is the one to read back.
"""

from __future__ import annotations

import re

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# Characters that start inline Markdown anywhere: escapes, code, emphasis, links, strikethrough, tables.
_INLINE_MARKS = re.compile(r"([\\`*_\[\]~|])")
# What starts a block at a line's start: an ATX heading, a list item, a setext underline, a quote.
# What viewers turn into a link with no brackets (GitHub's "http://…", "www.…"): a backslash in
# its middle keeps it text, shown as typed rather than with the escapes after it shown raw.
_BARE_ADDRESS = re.compile(r"(?<=[A-Za-z])(?=://)|(?<=\bwww)(?=\.)", re.IGNORECASE)
_BLOCK_START = re.compile(r"^(?:[#+=-]|(\d+)([.)]))")
# An inline link kept in an answer: ``](https://…)`` with no title and no character that could end
# the address early or start something else.
_SAFE_LINK_TARGET = re.compile(r"\((?:https?)://[^\s()<>\"'`\\]+\)", re.IGNORECASE)
_FENCE = re.compile(r"^(`{3,}(?=[^`]*$)|~{3,})")


def escape_text(text: str) -> str:
    """``text`` that a person or a file wrote, as Markdown that shows it as written: its line breaks
    as hard line breaks, leading indentation dropped (so no line turns into code)."""
    return "  \n".join(_escape_line(line) for line in text.splitlines())


def _escape_line(line: str) -> str:
    line = _INLINE_MARKS.sub(r"\\\1", _entities(line.strip()))
    line = _BARE_ADDRESS.sub(r"\\", line)
    return _BLOCK_START.sub(lambda match: f"{match[1]}\\{match[2]}" if match[1] else f"\\{match[0]}", line)


def code_span(text: str) -> str:
    """``text`` (a name or a path) as inline code on one line, shown as written by every viewer."""
    text = re.sub(r"[\r\n]+", " ", text)
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    # A viewer strips one space from each end when both ends have one, and a backtick at an end
    # would join the fence: pad with a space on each side in both cases.
    padded = text[:1] == "`" or text[-1:] == "`" or (text[:1] == " " and text[-1:] == " " and text.strip())
    pad = " " if padded else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def safe_answer(text: str) -> str:
    """The model's answer as Markdown with its own formatting where safe (see the module docstring)."""
    text = _neutralise_links(_neutralise_pictures(_entities(text)))
    return _close_open_fence(text)


def _entities(text: str) -> str:
    return re.sub(r"[&<>]", lambda match: _ENTITIES[match[0]], text)


def _neutralise_pictures(text: str) -> str:
    """Every ``![`` that would open a picture becomes ``!\\[``, text."""
    return re.sub(r"!\[", lambda match: match[0] if _escaped(text, match.start()) else "!\\[", text)


def _neutralise_links(text: str) -> str:
    """Every ``]`` that would close a link to anything but an http(s) address, or a link definition
    (``[label]: …``), gets a backslash: without its ``](`` or ``]:`` no link forms. A kept address
    gets its ``&`` back (viewers differ on entities in addresses; after its scheme, ``&`` is harmless)."""
    pieces, last = [], 0
    for match in re.finditer(r"\][(:]", text):
        at = match.start()
        if _escaped(text, at):
            continue
        target = _SAFE_LINK_TARGET.match(text, at + 1)
        if target:
            pieces += [text[last : at + 1], target[0].replace(_ENTITIES["&"], "&")]
            last = target.end()
        else:
            pieces += [text[last:at], "\\"]
            last = at
    return "".join(pieces) + text[last:]


def _escaped(text: str, at: int) -> bool:
    """Whether the character at ``at`` follows an odd run of backslashes (a Markdown escape)."""
    start = at
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    return (at - start) % 2 == 1


def _close_open_fence(text: str) -> str:
    """``text`` with a closing line added for a code fence it opens at a line's start and never closes."""
    opened = ""
    for line in text.splitlines():
        if not opened:
            found = _FENCE.match(line)
            opened = found[1] if found else ""
        elif re.fullmatch(rf" {{0,3}}{re.escape(opened[0])}{{{len(opened)},}}[ \t]*", line):
            opened = ""
    return f"{text}\n{opened}" if opened else text
