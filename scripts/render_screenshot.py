"""Render docs/screenshot.png: the window after the demo model answered questions about a sample clip.

The sample clips are opened one after another (so the encoder plot shows each), then the questions
are asked about the last one. With ``--click-time`` the first time the last answer mentions is
clicked (the preview goes there); ``--draft`` leaves a question typed but not sent.

    python scripts/render_screenshot.py --size 1920x1080 [--clip CLIP ...] [--question QUESTION ...] [--output docs/screenshot.png]
    python scripts/render_screenshot.py --size 1024x640 --scheme dark --output docs/screenshot-1024x640-dark.png
    python scripts/render_screenshot.py --clip assets/clips/two_shapes_wide.mp4 \
        --question "When does the circle appear?" --click-time --draft "What happens from 1 to 3 seconds?" \
        --output docs/screenshot-time-link.png
    python scripts/render_screenshot.py --clip assets/clips/red_square_moves_right.mp4 \
        --add assets/clips/two_shapes_wide.mp4 --question "How many shapes are there?" \
        --size 1024x640 --output docs/screenshot-two-clips.png

Runs offscreen (no display needed), with a throw-away settings file and log folder, on the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CLIPS = REPO_ROOT / "assets" / "clips"
DEFAULT_CLIPS = (CLIPS / "two_shapes_wide.mp4", CLIPS / "rotated_phone.mp4", CLIPS / "red_square_moves_right.mp4")
DEFAULT_QUESTIONS = ("What color is the square?", "Which way does the square move?", "How many shapes are there?")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    scratch = Path(tempfile.mkdtemp(prefix="framewise-screenshot-"))
    os.environ["FRAMEWISE_LOG_DIR"] = str(scratch / "logs")
    os.environ["FRAMEWISE_DATA_DIR"] = str(scratch / "data")  # kept conversations: a throw-away store

    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from framewise.app.gui import app_services, create_engine
    from framewise.core.settings import AppSettings
    from framewise.ui.main_window import DEFAULT_SIZE, MainWindow
    from framewise.ui.settings_store import SettingsStore
    from framewise.ui.worker import EngineHost

    app = QApplication.instance() or QApplication([sys.argv[0]])
    if args.scheme != "system":
        app.styleHints().setColorScheme(Qt.ColorScheme.Dark if args.scheme == "dark" else Qt.ColorScheme.Light)
        if args.scheme == "dark" and app.styleHints().colorScheme() != Qt.ColorScheme.Dark:
            app.setPalette(_inverted(app.palette()))  # platforms without a dark theme (offscreen): simulate one
    app.setApplicationName("Framewise")
    app.setOrganizationName("Framewise")
    settings = (
        AppSettings()
        .replace("model", device="cpu")
        .replace("sampling", max_frames=args.max_frames, pruning=args.pruning)
        .replace("generation", max_new_tokens=args.max_new_tokens)
    )
    window = MainWindow(EngineHost(create_engine, settings), SettingsStore(scratch / "framewise.ini"), app_services(), settings)
    # The exact size asked for, even where the window would open maximized on a smaller screen.
    window.setWindowState(Qt.WindowState.WindowNoState)
    window.resize(*(args.size or DEFAULT_SIZE))
    window.show()
    window.start()
    try:
        _wait(app, lambda: window.session.info is not None and window.session.operation is None, 180, "the model to load")
        for clip in args.clip or DEFAULT_CLIPS:
            window.session.open_clip(str(clip))
            _wait(app, lambda: not window.session.opening_clip and window.session.operation is None, 120, f"{clip.name} to be encoded")
        if window.session.clip is None:
            raise SystemExit("no clip could be opened")
        for count, added in enumerate(args.add or (), start=1):
            if not window.session.add_clip(str(added)):
                raise SystemExit(f"{added.name} could not be added")
            # Until it is in the conversation: the request may not have started when the wait begins.
            _wait(app, lambda: len(window.session.added) == count and window.session.operation is None, 120, f"{added.name} to be added")
        for question in args.question or DEFAULT_QUESTIONS:
            window.chat.question_edit.setPlainText(question)
            window.chat.submit()
            _wait(app, lambda: window.session.conversation.current is None and window.session.operation is None, 300, "the answer")
        if args.click_time:
            _click_first_time(window)
        else:
            window.clip_section.preview.seek(len(window.session.clip.timestamps) // 2)
        if args.draft:
            window.chat.question_edit.setPlainText(args.draft)
        window.clip_section.strip.setFocus()
        _wait(app, lambda: True, 0.5, "")
        image = window.grab().toImage()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(args.output)):
            raise SystemExit(f"could not write {args.output}")
        print(f"wrote {args.output} ({image.width()}x{image.height()})")
    finally:
        window.shutdown()
    return 0


def _click_first_time(window) -> None:
    """Click the first time the last answer mentions, as a person would; stop when it has none."""
    answers = window.chat.answer_cards()
    if not answers or not answers[-1].times:
        raise SystemExit("the last answer mentions no time to click; ask a question whose answer gives one")
    answers[-1].click_time(0)


def _wait(app, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Run the event loop until ``condition()`` holds (or, for an empty ``what``, for ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app.processEvents()
        if what and condition():
            return
        time.sleep(0.01)
    if what:
        raise SystemExit(f"gave up waiting for {what} after {timeout_s:.0f} s")


def _inverted(palette):
    """``palette`` with every colour's lightness flipped: a stand-in for a system dark scheme."""
    from PySide6.QtGui import QColor, QPalette

    dark = QPalette(palette)
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive, QPalette.ColorGroup.Disabled):
        for role in QPalette.ColorRole:
            if role == QPalette.ColorRole.NColorRoles:
                continue
            hue, saturation, lightness, alpha = palette.color(group, role).getHslF()
            if role not in (QPalette.ColorRole.Highlight, QPalette.ColorRole.Link, QPalette.ColorRole.LinkVisited):
                lightness = 1.0 - lightness
            dark.setColor(group, role, QColor.fromHslF(max(hue, 0.0), saturation, lightness, alpha))
    return dark


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clip", type=Path, action="append", help="a clip to open (repeat: each is encoded, questions go to the last)"
    )
    parser.add_argument(
        "--add", type=Path, action="append", help="a clip or picture to add to the conversation after the clips (repeat)"
    )
    parser.add_argument("--question", action="append", help="a question to ask (repeat for follow-ups)")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "screenshot.png")
    parser.add_argument("--click-time", action="store_true", help="click the first time the last answer mentions")
    parser.add_argument("--draft", help="a question left typed in the box, not sent (its times show on the timeline)")
    parser.add_argument("--scheme", choices=("system", "light", "dark"), default="system", help="colour scheme to render in")
    parser.add_argument("--size", type=_size, help="window size as WIDTHxHEIGHT (default: the window's default size)")
    parser.add_argument("--max-frames", type=int, default=16)
    parser.add_argument("--pruning", default="off", help="sampling.pruning: off, auto, or a rate")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    return parser


def _size(text: str) -> tuple[int, int]:
    width, _, height = text.lower().partition("x")
    return int(width), int(height)


if __name__ == "__main__":
    sys.exit(main())
