"""Finding the times a question or an answer mentions, so that the window can link them into the clip.

One parser, :func:`find_times`, reads what Qwen3-VL writes and what people type:

- the prompt's own markers: ``<12.5 seconds>``;
- clock times: ``0:12``, ``12:30``, ``1:02:03``, ``0:12.5``;
- amounts with units: ``12.5 seconds``, ``12.5s``, ``3 sec``, ``2 minutes 5 seconds``, ``1m30s``,
  ``1 hour 2 minutes``;
- ranges of any two of those: ``from 0:40 to 0:52``, ``0:40-0:52``, ``0:40–0:52``,
  ``between 3 and 5 seconds``, ``3 to 5 seconds`` (a bare first number takes the second's unit).

What it refuses, on purpose:

- a clock with one-digit seconds (``3:2`` is a score or a ratio, ``16:9`` an aspect ratio): clock
  seconds are always two digits;
- a time of day (``10:30 am``);
- anything glued to a word, a number or a version string (``v1:20``, ``1.2.3s``, ``10:30:45:12``);
- ``ms`` (milliseconds) and a bare ``m`` or ``h`` (``5 m`` is a distance): the abbreviations ``h``
  and ``m`` count only inside a compound such as ``1h30m``;
- ``1990s`` (a decade): the ``s`` abbreviation takes at most three digits before the point;
- a number with a thousands separator or a decimal comma (``1,000 seconds``), rather than misread it.

It does not tell a moment from a length: "it lasts 3 seconds" yields 3 s like "at 3 seconds"
does; a link to 0:03 there is harmless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_NUMBER = r"\d+(?:\.\d+)?"
_SHORT_NUMBER = r"\d{1,3}(?:\.\d+)?"
_UNIT_END = r"(?![A-Za-z])"
_TIME_END = r"(?![\w:]|\.\d)"
_NOT_AFTER = r"(?<![\w.:])(?<!\d,)"  # nor after "1," : "1,000 seconds" is not 0 seconds
_NOT_TIME_OF_DAY = r"(?!\s*[ap]\.?m\b\.?)"
_SEPARATOR = r"(?:\s*,?\s*(?:and\s+)?)"
_BEFORE_UNIT = r"(?:\s*|-)"  # "12 seconds", "12seconds", "the 12-second mark"

_HOUR_WORDS = r"(?:hours?|hrs?)"
_MINUTE_WORDS = r"(?:minutes?|mins?)"
_SECOND_WORDS = r"(?:seconds?|secs?)"


def _time_pattern(name: str) -> str:
    """A regex for one time, its groups prefixed with ``name`` so that a range can hold two."""
    n = name
    marker = rf"(?P<{n}_marker><\s*(?P<{n}_mark>{_NUMBER})\s*{_SECOND_WORDS}\s*>)"
    clock = (
        rf"(?P<{n}_clock>(?:(?P<{n}_ch>\d{{1,2}}):(?P<{n}_cm>[0-5]\d)|(?P<{n}_cmm>\d{{1,3}}))"
        rf":(?P<{n}_cs>[0-5]\d(?:\.\d+)?){_NOT_TIME_OF_DAY})"
    )
    # Unit amounts, largest unit first. A one-letter ``h`` or ``m`` alone is refused after matching
    # (:func:`_is_lone_letter_unit`); ``s`` takes at most three digits.
    hours_word = rf"(?P<{n}_h>{_NUMBER}){_BEFORE_UNIT}{_HOUR_WORDS}{_UNIT_END}"
    minutes_word = rf"(?P<{n}_m>{_NUMBER}){_BEFORE_UNIT}{_MINUTE_WORDS}{_UNIT_END}"
    seconds_word = rf"(?P<{n}_s>{_NUMBER}){_BEFORE_UNIT}{_SECOND_WORDS}{_UNIT_END}"
    seconds_short = rf"(?P<{n}_ss>{_SHORT_NUMBER})\s?s{_UNIT_END}"
    seconds = rf"(?:{seconds_word}|{seconds_short})"
    hours_short = rf"(?P<{n}_hh>\d+)h{_UNIT_END}"
    minutes_short = rf"(?P<{n}_mm>\d+)m{_UNIT_END}"
    # Every part is optional, yet an empty amount never matches: it starts at a digit, and
    # _TIME_END refuses a digit after it.
    amount = (
        rf"(?P<{n}_amount>(?=\d)"
        rf"(?:{hours_word}|{hours_short})?"
        rf"(?:{_SEPARATOR}(?:{minutes_word}|{minutes_short}))?"
        rf"(?:{_SEPARATOR}{seconds})?)"
    )
    return rf"(?:{marker}|{_NOT_AFTER}(?:{clock}|{amount}){_TIME_END})"


def _bare_number_pattern(name: str) -> str:
    """A number with no unit: the first end of a range whose second end carries the unit (``3 to 5 s``)."""
    return rf"{_NOT_AFTER}(?P<{name}_bare>{_NUMBER}){_TIME_END}"


_RANGE_TO = r"(?:\s+(?:to|until|till|through)\s+|\s*[-–—]\s*)"
_MENTION = re.compile(
    # between X and Y | [from] X to Y | X-Y, where X may be a bare number when Y has a unit
    rf"(?:(?P<between>\bbetween\s+)(?:{_time_pattern('a')}|{_bare_number_pattern('a')})\s+and\s+{_time_pattern('b')}"
    rf"|(?:{_time_pattern('c')}|{_bare_number_pattern('c')}){_RANGE_TO}{_time_pattern('d')}"
    rf"|{_time_pattern('e')})",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class TimeMention:
    """One time found in a text: ``text[start:end]`` reads as ``start_s`` (to ``end_s`` for a range)."""

    start: int
    end: int
    text: str
    start_s: float
    end_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "start_s": self.start_s, "end_s": self.end_s}


def find_times(text: str) -> list[TimeMention]:
    """Every time ``text`` mentions, in order, as non-overlapping spans of it (see the module's docstring)."""
    mentions: list[TimeMention] = []
    for match in _MENTION.finditer(text):
        if _is_time(match, "e"):
            if not _is_lone_letter_unit(match, "e"):
                mentions.append(_mention(text, match, "e", _seconds(match, "e")))
        elif match.group("between") is not None:
            mentions += _range(text, match, "a", "b")
        else:
            mentions += _range(text, match, "c", "d")
    return mentions


def _range(text: str, match: re.Match[str], first: str, second: str) -> list[TimeMention]:
    """The mention(s) of a range match: one range; or, when it runs backwards, its ends as two times;
    or only its second end when the first is a bare number that cannot borrow the second's unit."""
    if _is_lone_letter_unit(match, first) or _is_lone_letter_unit(match, second):
        return []
    second_mention = _mention(text, match, second, _seconds(match, second))
    if _is_time(match, first):
        first_mention = _mention(text, match, first, _seconds(match, first))
    elif match.group(f"{second}_clock") is None:  # "3 to 5 seconds": 3 takes the seconds of 5
        bare_start, bare_end = match.span(f"{first}_bare")
        start_s = float(match.group(f"{first}_bare")) * _largest_unit(match, second)
        first_mention = TimeMention(bare_start, bare_end, text[bare_start:bare_end], start_s)
    else:
        return [second_mention]
    if first_mention.start_s < second_mention.start_s:
        start, end = first_mention.start, second_mention.end
        return [TimeMention(start, end, text[start:end], first_mention.start_s, second_mention.start_s)]
    return [first_mention, second_mention] if _is_time(match, first) else [second_mention]


def _time_groups(name: str) -> tuple[str, ...]:
    return (f"{name}_marker", f"{name}_clock", f"{name}_amount")


def _is_time(match: re.Match[str], name: str) -> bool:
    return any(match.group(group) is not None for group in _time_groups(name))


def _mention(text: str, match: re.Match[str], name: str, seconds: float) -> TimeMention:
    """Time ``name`` of ``match`` as a mention of its own."""
    group = next(group for group in _time_groups(name) if match.group(group) is not None)
    start, end = match.span(group)
    return TimeMention(start, end, text[start:end], seconds)


def _is_lone_letter_unit(match: re.Match[str], name: str) -> bool:
    """True for ``5m`` or ``2h`` on its own: a distance or a duration as often as a time."""
    if match.group(f"{name}_amount") is None:
        return False
    written = [unit for unit in ("h", "hh", "m", "mm", "s", "ss") if match.group(f"{name}_{unit}") is not None]
    return written in (["hh"], ["mm"])


def _seconds(match: re.Match[str], name: str) -> float:
    """The seconds that time ``name`` of ``match`` stands for."""

    def value(group: str) -> float:
        found = match.group(f"{name}_{group}")
        return float(found) if found is not None else 0.0

    if match.group(f"{name}_marker") is not None:
        return value("mark")
    if match.group(f"{name}_clock") is not None:
        return value("ch") * 3600 + (value("cm") + value("cmm")) * 60 + value("cs")
    return (value("h") + value("hh")) * 3600 + (value("m") + value("mm")) * 60 + value("s") + value("ss")


def _largest_unit(match: re.Match[str], name: str) -> float:
    """Seconds per unit of the largest unit amount ``name`` is written in (``5 seconds`` -> 1, ``2 min`` -> 60)."""
    for seconds_per_unit, groups in ((3600.0, ("h", "hh")), (60.0, ("m", "mm"))):
        if any(match.group(f"{name}_{group}") is not None for group in groups):
            return seconds_per_unit
    return 1.0
