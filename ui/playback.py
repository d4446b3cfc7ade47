"""The preview's decode thread: plays a clip through :class:`~framewise.core.video.playback.ClipPlayback`.

The GUI thread only sends commands (open, play from a time, pause, show the frame at a time, close)
and receives ``frame_ready(time_s, image)`` signals; decoding, scaling and pacing happen on a
``threading.Thread`` of this object's own, so a slow decode never stalls the window. Commands
supersede each other: a seek while playing starts over from the new time at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from framewise.core.errors import FramewiseError
from framewise.core.video.playback import ClipPlayback

log = logging.getLogger(__name__)


_VIEW_COMMANDS = ("play", "show", "pause")


@dataclass(frozen=True)
class _Command:
    name: str  # "open", "close", "quit", or one of _VIEW_COMMANDS
    path: str | None = None
    time_s: float = 0.0


class _Commands:
    """A queue where a view command (play, show, pause) replaces the view commands still waiting after the
    last open or close, so dragging the timeline decodes only the latest position."""

    def __init__(self) -> None:
        self._items: deque[_Command] = deque()
        self._ready = threading.Condition()

    def put(self, command: _Command) -> None:
        with self._ready:
            if command.name in _VIEW_COMMANDS:
                while self._items and self._items[-1].name in _VIEW_COMMANDS:
                    self._items.pop()
            self._items.append(command)
            self._ready.notify()

    def get(self, timeout: float | None = None) -> _Command | None:
        """The next command, or ``None`` when ``timeout`` seconds pass without one."""
        with self._ready:
            if not self._ready.wait_for(lambda: bool(self._items), timeout=timeout):
                return None
            return self._items.popleft()


class PlaybackThread(QObject):
    """Decodes for display off the GUI thread.

    ``opened(duration_s)`` after a clip opened, ``failed(message)`` when it cannot be played,
    ``frame_ready(time_s, image)`` with a uint8 (h, w, 3) RGB array for each frame to show, and
    ``ended()`` when playing reached the clip's end.
    """

    opened = Signal(float)
    failed = Signal(str)
    frame_ready = Signal(float, object)
    ended = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._commands = _Commands()
        self._thread = threading.Thread(target=self._run, name="framewise-playback", daemon=True)
        self._thread.start()

    def open(self, path: str) -> None:
        self._commands.put(_Command("open", path))

    def play(self, from_s: float) -> None:
        self._commands.put(_Command("play", time_s=from_s))

    def show(self, time_s: float) -> None:
        """Show the frame on screen at ``time_s`` (and stop playing)."""
        self._commands.put(_Command("show", time_s=time_s))

    def pause(self) -> None:
        self._commands.put(_Command("pause"))

    def close_clip(self) -> None:
        self._commands.put(_Command("close"))

    def shutdown(self) -> None:
        """Stop the thread and wait for it (a few frames' time at most)."""
        self._commands.put(_Command("quit"))
        self._thread.join(timeout=5)

    # -- the decode thread ------------------------------------------------------------------

    def _run(self) -> None:
        playback: ClipPlayback | None = None
        command: _Command | None = None
        while True:
            command = command or self._commands.get()
            assert command is not None  # get() without a timeout waits for one
            if command.name == "quit":
                break
            if command.name == "open":
                playback = self._reopen(playback, command.path or "")
                command = None
            elif command.name == "close":
                playback = self._reopen(playback, None)
                command = None
            elif command.name == "show" and playback is not None:
                command = self._show(playback, command.time_s)
            elif command.name == "play" and playback is not None:
                command = self._play(playback, command.time_s)
            else:
                command = None
        if playback is not None:
            playback.close()

    def _reopen(self, playback: ClipPlayback | None, path: str | None) -> ClipPlayback | None:
        if playback is not None:
            playback.close()
        if not path:
            return None
        try:
            opened = ClipPlayback(path)
        except FramewiseError as error:
            log.warning("cannot play %s: %s", Path(path).name, error)
            self.failed.emit(str(error))
            return None
        self.opened.emit(opened.duration_s)
        return opened

    def _show(self, playback: ClipPlayback, time_s: float) -> _Command | None:
        try:
            frame = playback.frame_at(time_s)
        except FramewiseError as error:
            self.failed.emit(str(error))
            return None
        self.frame_ready.emit(frame.time_s, frame.image)
        return None

    def _play(self, playback: ClipPlayback, from_s: float) -> _Command | None:
        """Emit frames at their own pace from ``from_s``; returns the command that interrupted, if any."""
        started = time.monotonic()
        first: float | None = None
        for frame in playback.frames_from(from_s):
            first = frame.time_s if first is None else first
            delay = started + (frame.time_s - first) - time.monotonic()
            interrupting = self._commands.get(timeout=max(0.0, delay))
            if interrupting is not None:
                return interrupting
            self.frame_ready.emit(frame.time_s, frame.image)
        self.ended.emit()
        return None
