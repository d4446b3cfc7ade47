"""Times in an answer about several items are tied to the clip the answer names, or to the only
clip long enough to hold them; the rest stay untied."""

from __future__ import annotations

import pytest

from framewise.core.clip_times import ConversationItem, place_times, time_clip_names
from framewise.core.events import EncodeDone

# A 10 s clip, a 60 s clip, a picture, and a closer look at 20-30 s of the 60 s clip.
ITEMS = [
    ConversationItem.of("red.mp4", "video", 10.0),
    ConversationItem.of("blue_sky.mp4", "video", 60.0),
    ConversationItem.of("photo.png", "image", 0.0),
    ConversationItem.of("blue_sky.mp4 20.0–30.0 s", "video", 60.0, span=(20.0, 30.0)),
]


@pytest.mark.parametrize(
    ("answer", "clips"),
    [
        ("In the second clip at 0:12 the ball drops.", ["blue_sky.mp4"]),
        ("At 0:05 in clip 1 it is red.", ["red.mp4"]),  # a reference after the time, same sentence
        ("Video #2 darkens from 0:03 to 0:05.", ["blue_sky.mp4"]),
        ("The 1st video at 0:02, the 2nd video at 0:04.", ["red.mp4", "blue_sky.mp4"]),  # the nearest before wins
        ("In clip two, at 4 seconds.", ["blue_sky.mp4"]),
        ("The last clip shows it at 0:22.", ["blue_sky.mp4 20.0–30.0 s"]),  # closer looks count as clips
        ("In the third video at 0:25.", ["blue_sky.mp4 20.0–30.0 s"]),  # the picture is not counted
        ("blue_sky.mp4 shows it at 0:25.", ["blue_sky.mp4"]),  # a file's name: its clip before its closer looks
        ("In blue_sky at 0:45.", ["blue_sky.mp4"]),
        ("In red.mp4 at 0:40.", ["red.mp4"]),  # said outright, even past its end
        ("At 0:45 it is dark.", ["blue_sky.mp4"]),  # only the 60 s clip is that long
        ("At 0:05 it is dark.", [None]),  # every clip holds 0:05: untied
        ("At 0:25 it is dark.", [None]),  # the long clip and its closer look both hold it
        ("In the first clip, at 0:03. At 0:04 it ends.", ["red.mp4", None]),  # a reference holds for its sentence
        ("At 1 second in red.mp4.", ["red.mp4"]),
        ("In clip 9 at 0:04.", [None]),  # no such clip
        ("At <2.5 seconds> the picture is brighter.", [None]),
    ],
)
def test_each_time_is_tied_to_the_clip_the_answer_names_or_the_only_one_that_holds_it(answer, clips):
    assert list(time_clip_names(answer, ITEMS)) == clips


def test_a_second_named_file_does_not_read_as_an_ordinal():
    items = [ConversationItem.of("first.mp4", "video", 10.0), ConversationItem.of("second.mp4", "video", 10.0)]
    assert time_clip_names("In the second clip at 0:02; in second.mp4 at 0:03; first at 0:04.", items) == (
        "second.mp4", "second.mp4", "first.mp4",
    )


def test_with_one_item_nothing_is_tied():
    assert [placed.item for placed in place_times("In clip 1 at 0:02.", ITEMS[:1])] == [None]


def test_json_names_the_clip_of_each_time():
    placed = place_times("In the second clip from 0:03 to 0:05.", ITEMS)
    assert [time.to_json(ITEMS) for time in placed] == [
        {"text": "0:03 to 0:05", "start_s": 3.0, "end_s": 5.0, "clip": "blue_sky.mp4"}
    ]


def test_an_encoded_item_covers_its_clip_its_span_or_nothing():
    done = EncodeDone("a.mp4", 4, 64, (0.0, 1.0, 2.0, 3.0), 1.0, 1.0, 1.0, 0.5, False, duration_s=3.5)
    assert ConversationItem.encoded(done).covers == (0.0, 3.5)
    assert ConversationItem.encoded(EncodeDone("a.mp4", 4, 64, (0.0, 3.0), 1.0, 1.0, 1.0, 0.5, False)).covers == (0.0, 3.0)
    closer = EncodeDone("a.mp4 1.0–2.0 s", 4, 64, (1.0, 2.0), 1.0, 1.0, 1.0, 0.5, False, span=(1.0, 2.0), duration_s=3.5)
    assert ConversationItem.encoded(closer).covers == (1.0, 2.0) and ConversationItem.encoded(closer).file_name == "a.mp4"
    picture = EncodeDone("p.png", 1, 64, (0.0,), 1.0, 1.0, 1.0, 0.5, False, kind="image")
    assert ConversationItem.encoded(picture).covers is None
