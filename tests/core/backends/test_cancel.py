"""The one cancel scope on its own: which requests a cancel reaches, and when it is used up."""

from __future__ import annotations

import threading

import pytest

from framewise.core.backends.cancel import CancelScope
from framewise.core.errors import CancelledError


def runs_cancelled(scope: CancelScope, request_id: int) -> bool:
    """Whether request ``request_id`` is cancelled as it starts (it then ends at once)."""
    with scope.request(request_id):
        return scope.is_set()


def test_a_cancel_reaches_the_running_request_and_says_which() -> None:
    scope = CancelScope()
    with scope.request(5):
        assert not scope.is_set()
        assert scope.cancel(5) == 5
        assert scope.is_set() and scope.flag.is_set()
        with pytest.raises(CancelledError):
            scope.raise_if_cancelled()
    assert not scope.is_set(), "nothing runs: nothing is cancelled"


def test_a_cancel_of_an_ended_request_is_ignored() -> None:
    scope = CancelScope()
    assert not runs_cancelled(scope, 1)
    assert scope.cancel(1) is None  # Stop pressed just as request 1 ended
    assert not runs_cancelled(scope, 2), "the request after it is not stopped"


def test_a_cancel_before_a_request_starts_applies_to_it() -> None:
    scope = CancelScope()
    assert scope.cancel(3) is None, "nothing ran for it to reach"
    assert runs_cancelled(scope, 3)
    assert not runs_cancelled(scope, 4), "used up when request 3 ended"


def test_a_numbered_cancel_reaches_every_request_up_to_it_until_it_ends() -> None:
    scope = CancelScope()
    scope.cancel(4)  # Stop with requests 2, 3 and 4 waiting
    assert [runs_cancelled(scope, request_id) for request_id in (2, 3, 4, 5)] == [True, True, True, False]


def test_a_cancel_of_an_earlier_request_does_not_reach_a_later_one() -> None:
    scope = CancelScope()
    with scope.request(7):
        assert scope.cancel(6) is None and not scope.is_set()


def test_a_cancel_without_a_number_reaches_the_next_request_and_is_used_up_there() -> None:
    scope = CancelScope()
    scope.cancel()
    assert runs_cancelled(scope, 1)
    assert not runs_cancelled(scope, 2)
    with scope.request(3):
        assert scope.cancel() == 3 and scope.is_set()
    assert not runs_cancelled(scope, 4)


def test_a_request_inside_another_is_part_of_it() -> None:
    scope = CancelScope()
    with scope.request(8):
        with scope.request(9):  # new settings re-opening the clip, inside request 8
            scope.cancel(8)
            assert scope.is_set()
        assert scope.is_set(), "the inner block's end does not use the cancel up"
    assert not runs_cancelled(scope, 9), "request 8 ended; a later one runs as asked"


def test_a_cancel_from_another_thread_reaches_the_running_request() -> None:
    scope = CancelScope()
    reached: list[int | None] = []
    with scope.request(12):
        other = threading.Thread(target=lambda: reached.append(scope.cancel(12)))
        other.start()
        assert scope.flag.wait(5)
        other.join()
    assert reached == [12]
