"""Times in the conversation are links into the clip: a click seeks the preview and selects the strip
frame nearest it, a range selects its span on the timeline, and a question's times show while typed."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication, QLabel

from framewise.core.conversation import Turn
from framewise.core.timecodes import find_times
from framewise.ui.chat import ChatPanel, MessageCard, linked_html, parse_time_href, time_href
from framewise.ui.frames import Timeline, nearest_index
from tests.ui.fake_engine import FakeEngine
from tests.ui.test_main_window import ask_and_wait, open_and_wait, wait_ready
from tests.ui import probes

ANSWER = ("The", " square", " is", " left", " at", " 0:01", ",", " then", " right", " from", " 1.5", " to", " 3", " seconds", ".")
ANSWER_TEXT = "".join(ANSWER)


@pytest.fixture
def answering_with_times(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeEngine, "answer_words", ANSWER)


def link_position(label: QLabel, href: str) -> QPoint:
    """Where on ``label`` the link to ``href`` is, found as a person's pointer would: by hovering."""
    hovered: list[str] = []
    label.linkHovered.connect(hovered.append)
    step = max(2, label.fontMetrics().averageCharWidth() // 2)
    for y in range(step // 2, label.height(), step):
        for x in range(step // 2, label.width(), step):
            point = QPointF(x, y)
            move = QMouseEvent(
                QEvent.Type.MouseMove, point, label.mapToGlobal(point),
                Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
            )
            QApplication.sendEvent(label, move)
            if hovered and hovered[-1] == href:
                label.linkHovered.disconnect(hovered.append)
                return QPoint(x, y)
    raise AssertionError(f"no link to {href} on the label (hovered: {hovered})")


def click_time(qtbot, card: MessageCard, index: int) -> None:
    position = link_position(card.body, time_href(card.times[index], probes.time_items(card)[index]))
    qtbot.mouseClick(card.body, Qt.MouseButton.LeftButton, pos=position)


def test_clicking_a_time_in_an_answer_seeks_the_preview_and_selects_the_nearest_frame(
    qtbot, make_window, sample_clip, answering_with_times
):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "Where is the square?")
    card = window.chat.answer_cards()[-1]
    assert card.text() == ANSWER_TEXT
    assert [time.text for time in card.times] == ["0:01", "1.5 to 3 seconds"]
    timestamps = window.session.clip.timestamps
    nearest = nearest_index(timestamps, 1.0)
    assert nearest != nearest_index(timestamps, 0.0)

    clicked: list[tuple[float, object]] = []
    window.chat.time_clicked.connect(lambda start, end: clicked.append((start, end)))
    click_time(qtbot, card, 0)

    assert clicked == [(1.0, None)]
    assert window.clip_section.preview.position == pytest.approx(1.0)
    assert window.clip_section.strip.currentRow() == nearest
    assert window.clip_section.preview.timeline.selected_span is None


def test_clicking_a_range_selects_its_span_on_the_timeline(qtbot, make_window, sample_clip, answering_with_times):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "Where is the square?")
    card = window.chat.answer_cards()[-1]
    duration = window.session.clip.duration_s
    assert duration > 3.0

    click_time(qtbot, card, 1)

    assert window.clip_section.preview.timeline.selected_span == (1.5, 3.0)
    assert window.clip_section.preview.position == pytest.approx(1.5)
    assert window.clip_section.strip.currentRow() == nearest_index(window.session.clip.timestamps, 1.5)
    card.click_time(0)  # a single time clears the span
    assert window.clip_section.preview.timeline.selected_span is None and window.clip_section.preview.position == pytest.approx(1.0)


def test_the_selected_span_and_the_questions_times_are_painted_on_the_timeline(qtbot):
    timeline = Timeline()
    qtbot.addWidget(timeline)
    timeline.resize(400, timeline.sizeHint().height())
    timeline.set_clip(4.0, (0.0, 1.0, 2.0, 3.0))
    inside, outside = round(timeline.x_of(2.5)), round(timeline.x_of(0.5))

    def colour(x: int) -> int:
        return timeline.grab().toImage().pixel(x, 2)

    assert colour(inside) == colour(outside)
    timeline.select_span(2.0, 3.0)
    assert colour(inside) != colour(outside)
    timeline.clear_span()
    assert colour(inside) == colour(outside)
    timeline.set_question_times(find_times("what happens at 0:02.5?"))
    assert colour(inside) != colour(outside)


def test_a_time_past_the_clips_end_goes_to_the_end_and_says_so(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    window.clip_section.show_moment(600.0, None)
    assert window.clip_section.preview.position == pytest.approx(window.session.clip.duration_s)
    assert "10:00.0 is past the clip's end" in window.status_bar.message.text()
    window.clip_section.show_moment(500.0, 700.0)
    assert window.clip_section.preview.timeline.selected_span is None  # wholly outside the clip


def test_times_in_the_question_being_typed_show_on_the_timeline(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    timeline = window.clip_section.preview.timeline
    found: list[list[tuple[float, float | None]]] = []
    window.chat.question_times_changed.connect(
        lambda times: found.append([(placed.time.start_s, placed.time.end_s) for placed in times])
    )
    window.chat.question_edit.setPlainText("What happens at 0:02, and from 1 to 2.5 seconds?")
    assert found[-1] == [(2.0, None), (1.0, 2.5)]
    assert probes.marks_question_time(timeline, 2.0) and probes.marks_question_time(timeline, 1.0, 2.5)
    window.chat.question_edit.setPlainText("What happens?")
    assert found[-1] == []
    assert not probes.marks_question_time(timeline, 2.0) and not probes.marks_question_time(timeline, 1.0, 2.5)


def test_times_in_the_question_card_are_links_too(qtbot, make_window, sample_clip):
    window = make_window()
    wait_ready(qtbot, window)
    open_and_wait(qtbot, window, sample_clip)
    ask_and_wait(qtbot, window, "What is at 0:02?")
    question_card = [card for card in window.chat.cards() if card.role == "question"][-1]
    assert [time.start_s for time in question_card.times] == [2.0]
    question_card.click_time(0)
    assert window.clip_section.preview.position == pytest.approx(2.0)


def test_a_streaming_answer_links_a_time_only_once_text_follows_it(qtbot):
    card = MessageCard("answer", "demo")
    qtbot.addWidget(card)
    card.set_text("It moves at 0:1", complete=False)
    assert card.times == [] and card.body.textFormat() == Qt.TextFormat.PlainText
    card.set_text("It moves at 0:12", complete=False)
    assert card.times == []  # "0:12" may still become "0:12.5"
    card.set_text("It moves at 0:12 and", complete=False)
    assert [time.text for time in card.times] == ["0:12"]
    card.set_text("It moves at 0:12")
    assert [time.text for time in card.times] == ["0:12"]
    assert card.text() == "It moves at 0:12"


def test_an_error_after_a_failed_answer_gets_no_links(qtbot):
    chat = ChatPanel()
    qtbot.addWidget(chat)
    turn = Turn("When?", "demo", None)
    chat.start_turn(turn, "")
    turn.answer, turn.status, turn.error = "At 0:02", "failed", "The server did not answer within 30 seconds."
    chat.finish_turn(turn)
    card = chat.answer_cards()[-1]
    assert "30 seconds" in card.text()
    assert [time.text for time in card.times] == ["0:02"]


def test_linked_text_keeps_its_characters_and_lines():
    text = "a <b> & 0:12\n  indented 3 to 5 s"
    markup = linked_html(text, find_times(text))
    assert '<a href="time:12.0">0:12</a>' in markup and '<a href="time:3.0,5.0">3 to 5 s</a>' in markup
    assert "&lt;b&gt; &amp;" in markup and "white-space: pre-wrap" in markup


@pytest.mark.parametrize(
    ("href", "parsed"),
    [
        ("time:12.5", (12.5, None)),
        ("time:40.0,52.0", (40.0, 52.0)),
        ("time:1e-05,0.5", (1e-05, 0.5)),
        ("https://example.org", None),
        ("time:x", None),
    ],
)
def test_time_links_read_back(href, parsed):
    assert parse_time_href(href) == parsed


def test_a_time_tied_to_an_item_links_to_its_tab_and_a_click_names_it(qtbot):
    card = MessageCard("answer", "demo")
    qtbot.addWidget(card)
    card.set_text("In clip 2 at 0:12, then at 0:20.", items=[1, None])
    assert '<a href="time:12.0@1">0:12</a>' in linked_html(card.text(), card.times, probes.time_items(card))
    plain, tied = [], []
    card.time_clicked.connect(lambda start, end: plain.append((start, end)))
    card.item_time_clicked.connect(lambda item, start, end: tied.append((item, start, end)))
    card.click_time(0)
    card.click_time(1)
    assert tied == [(1, 12.0, None)] and plain == [(20.0, None)]
