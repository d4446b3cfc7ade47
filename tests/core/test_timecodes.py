"""The time parser over a table of what Qwen3-VL writes, what people type, and what only looks like a time."""

from __future__ import annotations

import pytest

from framewise.core.timecodes import TimeMention, find_times

# (text, [(linked text, start_s, end_s), ...])
FOUND = [
    # Qwen3-VL's own prompt markers, alone and as a range
    ("It appears at <12.5 seconds>.", [("<12.5 seconds>", 12.5, None)]),
    ("from <3.0 seconds> to <5.0 seconds>", [("<3.0 seconds> to <5.0 seconds>", 3.0, 5.0)]),
    ("<4 second>", [("<4 second>", 4.0, None)]),
    # amounts with units
    ("The ball drops at 12.5 seconds.", [("12.5 seconds", 12.5, None)]),
    ("at 12.5s", [("12.5s", 12.5, None)]),
    ("at 3 s", [("3 s", 3.0, None)]),
    ("about 1 second in", [("1 second", 1.0, None)]),
    ("at 7 secs", [("7 secs", 7.0, None)]),
    ("at the 3.5-second mark", [("3.5-second", 3.5, None)]),
    ("2 minutes 5 seconds", [("2 minutes 5 seconds", 125.0, None)]),
    ("2 minutes and 5 seconds", [("2 minutes and 5 seconds", 125.0, None)]),
    ("after 2 min", [("2 min", 120.0, None)]),
    ("1 hour 2 minutes", [("1 hour 2 minutes", 3720.0, None)]),
    ("at 1m30s", [("1m30s", 90.0, None)]),
    ("at 1h2m3s", [("1h2m3s", 3723.0, None)]),
    ("AT 4 SECONDS", [("4 SECONDS", 4.0, None)]),
    # clock times
    ("at 0:12", [("0:12", 12.0, None)]),
    ("what happens at 1:20?", [("1:20", 80.0, None)]),
    ("12:30", [("12:30", 750.0, None)]),
    ("at 1:02:03.", [("1:02:03", 3723.0, None)]),
    ("at 0:12.5", [("0:12.5", 12.5, None)]),
    ("(0:07)", [("0:07", 7.0, None)]),
    ("the final 21:15", [("21:15", 1275.0, None)]),  # read as a time: two-digit seconds are a clock
    # ranges
    ("from 0:40 to 0:52", [("0:40 to 0:52", 40.0, 52.0)]),
    ("0:40-0:52", [("0:40-0:52", 40.0, 52.0)]),
    ("0:40–0:52", [("0:40–0:52", 40.0, 52.0)]),
    ("0:40 — 0:52", [("0:40 — 0:52", 40.0, 52.0)]),
    ("between 3 and 5 seconds", [("3 and 5 seconds", 3.0, 5.0)]),
    ("between 0:40 and 0:52", [("0:40 and 0:52", 40.0, 52.0)]),
    ("3 to 5 seconds", [("3 to 5 seconds", 3.0, 5.0)]),
    ("3-5s", [("3-5s", 3.0, 5.0)]),
    ("between 1 and 2 minutes", [("1 and 2 minutes", 60.0, 120.0)]),
    ("it took 3s-5s", [("3s-5s", 3.0, 5.0)]),
    ("from 12 seconds until 0:15", [("12 seconds until 0:15", 12.0, 15.0)]),
    # several in one text, and ranges that are not ranges
    ("at 0:12 and 0:40", [("0:12", 12.0, None), ("0:40", 40.0, None)]),
    ("at 00:12", [("00:12", 12.0, None)]),
    ("12.5 - 15.0 seconds", [("12.5 - 15.0 seconds", 12.5, 15.0)]),
    ("0:05, 0:10 and 1 minute", [("0:05", 5.0, None), ("0:10", 10.0, None), ("1 minute", 60.0, None)]),
    ("from 0:52 to 0:40", [("0:52", 52.0, None), ("0:40", 40.0, None)]),  # backwards: two times
    ("between 1 minute and 30 seconds", [("1 minute", 60.0, None), ("30 seconds", 30.0, None)]),
    ("40 - 0:52", [("0:52", 52.0, None)]),  # a bare number cannot borrow a clock's unit
    ("5 to 3 seconds", [("3 seconds", 3.0, None)]),
]

NOT_TIMES = [
    "the score was 3:2",  # one-digit seconds: a score
    "a 16:9 picture",  # an aspect ratio
    "the 1990s",  # a decade
    "12 ms per frame",
    "12ms",
    "version 1.2.3s",
    "v1:20",
    "1.5:30",
    "10:30 am",
    "at 10:30 p.m.",
    "10:30:45:12",
    "a 5m wall",  # a one-letter unit alone is a distance as often as a time
    "in 2h",
    "5 apples",
    "pages 3 to 5",
    "3-2",
    "abc12s",
    "12sec2",
    "x0:12",
    "1,000 seconds",  # read whole or not at all: never as "000 seconds"
    "12,5 seconds",
    "0:60",  # seconds past 59
    "1:75:00",
    "",
]


@pytest.mark.parametrize(("text", "expected"), FOUND)
def test_times_are_found_with_their_seconds(text: str, expected: list[tuple[str, float, float | None]]):
    assert [(found.text, found.start_s, found.end_s) for found in find_times(text)] == expected


@pytest.mark.parametrize("text", NOT_TIMES)
def test_what_only_looks_like_a_time_is_not_one(text: str):
    assert find_times(text) == []


def test_spans_point_into_the_text_and_serialize():
    text = "He enters at 0:12, then sits from 0:40 to 0:52."
    mentions = find_times(text)
    assert [text[m.start : m.end] for m in mentions] == ["0:12", "0:40 to 0:52"]
    assert [m.end_s is not None for m in mentions] == [False, True], "the second is a range"
    assert mentions[1].to_json() == {"text": "0:40 to 0:52", "start_s": 40.0, "end_s": 52.0}


def test_a_time_cut_off_at_the_end_of_a_stream_is_found_for_what_it_reads_so_far():
    # The window links a time at the very end of streamed text only once more text follows.
    assert find_times("at 0:1") == []
    assert find_times("at 0:12") == [TimeMention(3, 7, "0:12", 12.0)]
