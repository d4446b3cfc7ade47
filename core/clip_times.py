"""Which clip a time in an answer belongs to, when the conversation holds several items.

An answer about two clips says "in the second clip at 0:12" or "red.mp4 starts dark, then at 0:03
...". :func:`place_times` ties each time :func:`~framewise.core.timecodes.find_times` finds to one
item of the conversation:

1. where the answer names it in the same sentence: "clip 2", "video #2", "the first clip", "the
   2nd video", "the last clip", or the file's name (with or without its extension). A reference
   before the time wins over one after it, the nearest first. Numbers count the clips (closer looks
   included) in the order they joined the conversation, which is the order the prompt shows them;
   pictures have no times and are never counted;
2. else, where only one clip is long enough to hold the time (a closer look holds only its span).

A name shared by a clip and its closer looks narrows to those that hold the time, the clip itself
first. Anything else
stays untied (``None``): the window applies it to the clip on screen, as with a single clip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from framewise.core.events import EncodeDone
from framewise.core.timecodes import TimeMention, find_times

# How far past a clip's end a time may fall and still be the clip's (answers round: "at 10 s" of 9.97 s).
_END_SLACK_S = 0.5

_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5,
    "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "last": -1,
}
_CARDINALS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_NOUN = r"(?:clip|video|movie|recording)"
_ORDINAL_REFERENCE = re.compile(
    rf"\b(?P<ordinal>{'|'.join(_ORDINALS)}|\d{{1,2}}(?:st|nd|rd|th))\s+{_NOUN}\b", re.IGNORECASE
)
# "clip 2", "video #2", "clip two"; not "clip 1:20" nor "video 2.5 s" (those are times).
_NUMBERED_REFERENCE = re.compile(
    rf"\b{_NOUN}\s*#?\s*(?P<number>\d{{1,2}}|{'|'.join(_CARDINALS)})\b(?![:.]\d)", re.IGNORECASE
)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
_SPAN_SUFFIX = re.compile(r" \d+(?:\.\d+)?–\d+(?:\.\d+)? s$")


@dataclass(frozen=True)
class ConversationItem:
    """One item of a conversation as an answer's times can point at it: its ``name`` (a closer look's
    names its file and span), its ``kind`` (``"video"`` or ``"image"``) and the seconds it ``covers``
    (the whole clip, a closer look's span; ``None`` for a picture)."""

    name: str
    kind: str
    covers: tuple[float, float] | None

    @classmethod
    def of(
        cls, name: str, kind: str, duration_s: float, span: tuple[float, float] | None = None
    ) -> ConversationItem:
        """A picture (``kind`` ``"image"``), a clip of ``duration_s`` seconds, or a closer look at its ``span``."""
        if kind == "image":
            return cls(name, "image", None)
        return cls(name, "video", span if span is not None else (0.0, duration_s))

    @classmethod
    def encoded(cls, done: EncodeDone) -> ConversationItem:
        """The item an encoded clip, picture or closer look is (a clip of unknown length lasts to its last frame)."""
        return cls.of(done.clip_name, done.kind, done.duration_s or max(done.timestamps, default=0.0), done.span)

    @property
    def file_name(self) -> str:
        """The name of the file it was read from (a closer look's without its span)."""
        return _SPAN_SUFFIX.sub("", self.name)

    def holds(self, time: TimeMention) -> bool:
        """Whether ``time`` (a moment or a range) falls inside what the item covers."""
        if self.covers is None:
            return False
        start, end = self.covers
        last = time.end_s if time.end_s is not None else time.start_s
        return start - _END_SLACK_S <= time.start_s and last <= end + _END_SLACK_S


@dataclass(frozen=True)
class PlacedTime:
    """A time an answer mentions and the index of the item it belongs to (``None``: not known)."""

    time: TimeMention
    item: int | None

    def to_json(self, items: Sequence[ConversationItem]) -> dict[str, Any]:
        """The time's JSON (text and seconds) and ``clip``: the name of its item, or ``None``."""
        return {**self.time.to_json(), "clip": None if self.item is None else items[self.item].name}


@dataclass(frozen=True)
class _Reference:
    """Where ``text[start:end]`` names items (their indices): one, or a clip and its closer looks."""

    start: int
    end: int
    items: frozenset[int]


def place_times(text: str, items: Sequence[ConversationItem]) -> list[PlacedTime]:
    """Every time ``text`` mentions with the item it belongs to (see the module's docstring); every
    time is untied when there are fewer than two items."""
    times = find_times(text)
    if len(items) < 2:
        return [PlacedTime(time, None) for time in times]
    references = [
        reference
        for reference in _references(text, items)
        if not any(time.start < reference.end and reference.start < time.end for time in times)
    ]
    return [PlacedTime(time, _item_of(time, text, references, items)) for time in times]


def time_clip_names(text: str, items: Sequence[ConversationItem]) -> tuple[str | None, ...]:
    """For each time ``text`` mentions, in order, the name of the item it belongs to, or ``None``."""
    return tuple(None if placed.item is None else items[placed.item].name for placed in place_times(text, items))


def _item_of(
    time: TimeMention, text: str, references: Sequence[_Reference], items: Sequence[ConversationItem]
) -> int | None:
    sentence = _sentence_around(text, time.start)
    before = [ref for ref in references if sentence[0] <= ref.start and ref.end <= time.start]
    after = [ref for ref in references if time.end <= ref.start and ref.end <= sentence[1]]
    named = (before[-1:] or after[:1])
    if named:
        # A file's name names its clip and its closer looks: those holding the time, the clip first
        # (it joined the conversation before any closer look at it).
        candidates = sorted(named[0].items)
        holding = [index for index in candidates if items[index].holds(time)]
        return (holding or candidates)[0]
    holding = {index for index, item in enumerate(items) if item.holds(time)}
    return next(iter(holding)) if len(holding) == 1 else None


def _sentence_around(text: str, position: int) -> tuple[int, int]:
    """(start, end) of the sentence of ``text`` that holds ``position``."""
    start, end = 0, len(text)
    for match in _SENTENCE_END.finditer(text):
        if match.end() <= position:
            start = match.end()
        elif match.start() >= position:
            end = match.start()
            break
    return start, end


def _references(text: str, items: Sequence[ConversationItem]) -> list[_Reference]:
    """The places ``text`` names items, in order; a longer one wins where two overlap
    ("the second clip" over a file named "second.mp4")."""
    clips = [index for index, item in enumerate(items) if item.kind == "video"]
    found: list[_Reference] = []
    for match in _ORDINAL_REFERENCE.finditer(text):
        found += _numbered(match, _ordinal_value(match.group("ordinal")), clips)
    for match in _NUMBERED_REFERENCE.finditer(text):
        number = match.group("number").lower()
        found += _numbered(match, int(number) if number.isdigit() else _CARDINALS[number], clips)
    for name, indices in _names(items).items():
        for match in re.finditer(rf"(?<![\w.]){re.escape(name)}(?![\w])", text, re.IGNORECASE):
            found.append(_Reference(match.start(), match.end(), frozenset(indices)))
    found.sort(key=lambda reference: (reference.start, -(reference.end - reference.start)))
    kept: list[_Reference] = []
    for reference in found:
        if kept and reference.start < kept[-1].end:
            continue
        kept.append(reference)
    return kept


def _numbered(match: re.Match[str], number: int, clips: Sequence[int]) -> list[_Reference]:
    """The reference ``match`` makes to clip ``number`` (1-based; -1 the last), or none when there is no such clip."""
    if number == -1 and clips:
        return [_Reference(match.start(), match.end(), frozenset({clips[-1]}))]
    if 1 <= number <= len(clips):
        return [_Reference(match.start(), match.end(), frozenset({clips[number - 1]}))]
    return []


def _ordinal_value(word: str) -> int:
    word = word.lower()
    return _ORDINALS[word] if word in _ORDINALS else int(word[:-2])


def _names(items: Sequence[ConversationItem]) -> dict[str, list[int]]:
    """The names a clip may be called by (its file's name, and that name without its extension when
    it is at least three characters), each with the clips of that file."""
    names: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if item.kind != "video":
            continue
        file_name = item.file_name
        stem = Path(file_name).stem
        for name in {file_name, stem} if len(stem) >= 3 else {file_name}:
            names.setdefault(name, []).append(index)
    return names
