"""A conversation's exports: Markdown for people, JSON that reads back; wording of answer stats."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from framewise.core.conversation import Conversation, Turn, format_answer_stats
from framewise.core.errors import ExportError
from framewise.core.events import RATE_MIN_TOKENS, AnswerStats, DecoderStats
from framewise.core.settings import AppSettings
from framewise.core.wording import plural


def _stats(new_tokens: int, tokens_per_second: float = 40.0, cancelled: bool = False) -> AnswerStats:
    return AnswerStats(30.0, new_tokens, tokens_per_second, cancelled)


def test_exports_label_demo_answers_and_mark_failures():
    conversation = Conversation("clip.mp4", "/clips/clip.mp4", timestamps=(0.0, 0.5, 1.0))
    conversation.turns.append(
        Turn("What colour?", "demo", "Demo model — random weights", answer="Red.", status="done", stats=_stats(3))
    )
    conversation.turns.append(Turn("And now?", "demo", "Demo model — random weights", status="failed", error="Out of memory."))
    conversation.turns.append(Turn("Then?", "demo", "Demo model — random weights", status="interrupted"))
    markdown = conversation.to_markdown(AppSettings())
    assert "# Framewise conversation — `clip.mp4`" in markdown
    assert "**Answer** — demo (Demo model — random weights)" in markdown
    assert "> Error: Out of memory." in markdown
    assert "3 frames sampled at (s): 0.00, 0.50, 1.00" in markdown
    assert "Framewise closed before this answer was finished" in markdown
    data = json.loads(json.dumps(conversation.to_json(AppSettings())))
    assert [turn["status"] for turn in data["turns"]] == ["done", "failed", "interrupted"]
    assert data["turns"][0]["stats"]["tokens_per_second"] == 40.0
    assert data["clip"]["timestamps"] == [0.0, 0.5, 1.0]
    assert AppSettings.from_dict(data["settings"]) == AppSettings()


def test_export_picks_the_format_from_the_suffix(tmp_path: Path):
    conversation = Conversation("clip.mp4", "/clips/clip.mp4", [Turn("Q?", "demo", None, answer="A.", status="done")])
    settings = AppSettings().replace("sampling", fps=1.0)
    conversation.export(tmp_path / "c.JSON", settings)
    conversation.export(tmp_path / "c.md", settings)
    assert json.loads((tmp_path / "c.JSON").read_text(encoding="utf-8"))["settings"]["sampling"]["fps"] == 1.0
    assert (tmp_path / "c.md").read_text(encoding="utf-8").startswith("# Framewise conversation")


def test_export_to_an_unwritable_place_is_a_typed_error(tmp_path: Path):
    with pytest.raises(ExportError, match="Choose another folder"):
        Conversation().export(tmp_path / "missing" / "c.md", AppSettings())


def test_answer_stats_words_count_right_and_skip_the_speed_of_one_token():
    assert format_answer_stats(_stats(1, tokens_per_second=0.0)).startswith("1 token · first token")
    assert format_answer_stats(_stats(8)).startswith("40.0 tokens/s (8 tokens) · first token 30 ms")
    assert format_answer_stats(_stats(0)).startswith("no token in 30 ms"), "stopped before the first token"
    assert plural(1, "pass", "passes") == "1 pass" and plural(1200, "chunk") == "1,200 chunks" and plural(0, "frame") == "0 frames"


def test_exports_keep_the_times_an_answer_mentions_with_their_seconds():
    answer = "It enters at <2.5 seconds> and stays from 0:40 to 0:52."
    conversation = Conversation("clip.mp4", "/clips/clip.mp4", [Turn("When?", "demo", None, answer=answer, status="done")])
    data = json.loads(conversation.export_text(AppSettings(), ".json"))
    assert data["turns"][0]["times"] == [
        {"text": "<2.5 seconds>", "start_s": 2.5, "end_s": None},
        {"text": "0:40 to 0:52", "start_s": 40.0, "end_s": 52.0},
    ]
    markdown = conversation.to_markdown(AppSettings())
    assert "It enters at &lt;2.5 seconds&gt; and stays from 0:40 to 0:52." in markdown, "a time marker is no HTML tag"
    assert "_Times: `<2.5 seconds>` = 2.5 s; `0:40 to 0:52` = 40–52 s_" in markdown
    quiet = Conversation("clip.mp4", None, [Turn("What?", "demo", None, answer="A red square.", status="done")])
    assert "Times:" not in quiet.to_markdown(AppSettings())
    assert quiet.to_json(AppSettings())["turns"][0]["times"] == []


def test_below_a_handful_of_tokens_the_count_and_time_show_instead_of_a_rate():
    """A 2-token answer once read 922.4 tokens/s: one gap between tokens is no rate."""
    two = AnswerStats(30.0, 2, 922.4, False)
    assert two.speed_text() == "2 tokens in 31 ms"  # 30 ms to the first token, 1/922.4 s to the second
    assert format_answer_stats(two).startswith("2 tokens in 31 ms · first token 30 ms")
    assert "tokens/s" not in format_answer_stats(two)
    assert AnswerStats(30.0, RATE_MIN_TOKENS - 1, 40.0, False).speed_text() == "7 tokens in 180 ms"
    assert AnswerStats(30.0, RATE_MIN_TOKENS, 40.0, False).speed_text() == "40.0 tokens/s (8 tokens)"


def test_the_decoder_line_gives_a_rate_only_over_enough_steps():
    few = DecoderStats(False, 0, 1, 192, 0, 192, 3206.0, 1084.6, 0.92, 0.92, 2816, "end of answer")
    assert few.summary().endswith("0 of 192 prompt tokens reused, 1 decode step of 0.9 ms")
    many = dataclasses.replace(few, eager_steps=RATE_MIN_TOKENS - 1, tokens_per_second=210.5)
    assert many.summary().endswith("210.5 tokens/s")


def test_exports_say_which_item_each_time_belongs_to():
    answer = "In the second clip at 0:12; at 0:03 both are dark."
    turn = Turn("When?", "demo", None, answer=answer, status="done", saw=("a.mp4", "b.mp4"), time_clips=("b.mp4", None))
    conversation = Conversation("a.mp4", "/clips/a.mp4", [turn])
    data = json.loads(conversation.export_text(AppSettings(), ".json"))
    assert [(time["text"], time["clip"]) for time in data["turns"][0]["times"]] == [("0:12", "b.mp4"), ("0:03", None)]
    assert "_Times: `0:12` = 12 s in `b.mp4`; `0:03` = 3 s_" in conversation.to_markdown(AppSettings())


def test_the_markdown_export_keeps_what_people_and_files_wrote_as_text():
    name = "<b>a</b>.mp4"
    question = '<img src=x onerror=alert(1)> [click](file:///etc/passwd) typed &lt;b&gt;'
    turn = Turn(question, "demo", "label <i>x</i>", answer="**Red** <script>x</script>", status="failed", error="<b>no</b>")
    markdown = Conversation(name, f"/clips/{name}", [turn]).to_markdown(AppSettings())
    assert "# Framewise conversation — `<b>a</b>.mp4`" in markdown
    assert "- Clip: `<b>a</b>.mp4` (`/clips/<b>a</b>.mp4`)" in markdown
    assert "&lt;img src=x onerror=alert(1)&gt; \\[click\\](file\\:///etc/passwd) typed &amp;lt;b&amp;gt;" in markdown
    assert "**Answer** — demo (label &lt;i&gt;x&lt;/i&gt;)" in markdown and "- Model: demo (label &lt;i&gt;x&lt;/i&gt;)" in markdown
    assert "**Red** &lt;script&gt;x&lt;/script&gt;" in markdown and "> Error: &lt;b&gt;no&lt;/b&gt;" in markdown
    assert "<img" not in markdown and "<script" not in markdown and "<i>" not in markdown
