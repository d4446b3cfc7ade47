"""The engine's events reach the GUI thread in order, from any thread, and a burst of them is
followed over several turns of the event loop, so the window paints and fires its timers between."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QTimer

from framewise.ui.worker import EVENTS_TURN_S, EventRelay


def test_events_put_from_another_thread_arrive_in_order_on_the_gui_thread(qtbot) -> None:
    relay = EventRelay()
    arrived: list[tuple[int, bool]] = []
    relay.event.connect(lambda event: arrived.append((event, threading.current_thread() is threading.main_thread())))
    sender = threading.Thread(target=lambda: [relay.put(index) for index in range(500)])
    sender.start()
    sender.join()
    qtbot.waitUntil(lambda: len(arrived) == 500)
    assert arrived == [(index, True) for index in range(500)]


def test_a_burst_of_slow_events_lets_a_timer_fire_between_its_turns(qtbot) -> None:
    """Twenty events that each take a third of a turn's time: put at once, they are followed in
    turns of about three, and a 0 ms timer started with them fires before the last one."""
    relay = EventRelay()
    followed: list[str] = []

    def follow(event: str) -> None:
        time.sleep(EVENTS_TURN_S / 3)
        followed.append(event)

    relay.event.connect(follow)
    timer = QTimer()
    timer.setSingleShot(True)
    timer.setInterval(0)
    timer.timeout.connect(lambda: followed.append("timer"))
    for index in range(20):
        relay.put(f"event {index}")
    timer.start()
    qtbot.waitUntil(lambda: len(followed) == 21)
    assert [event for event in followed if event != "timer"] == [f"event {index}" for index in range(20)]
    assert followed.index("timer") < 20 - 3


def test_an_event_put_while_one_is_followed_in_a_nested_loop_is_followed_there(qtbot) -> None:
    """A handler that waits in a loop of its own (a dialog) still sees the events put meanwhile."""
    relay = EventRelay()
    followed: list[int] = []

    def follow(event: int) -> None:
        followed.append(event)
        if event == 0:
            relay.put(1)
            qtbot.waitUntil(lambda: 1 in followed, timeout=2000)

    relay.event.connect(follow)
    relay.put(0)
    qtbot.waitUntil(lambda: followed == [0, 1])
