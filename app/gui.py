"""``framewise-studio`` / ``python -m framewise.app``: the desktop window.

The composition root: it creates the ``QApplication``, the settings store, the engine's worker
thread (with ``core.backends.local.engine.Engine``) and the main window, shows the window at once and only
then starts loading the model on the worker thread.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Mapping, Sequence

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from framewise.app.diagnostics import collect_versions
from framewise.app.logs import log_file_path, setup_logging
from framewise import __version__
from framewise.core.backends.base import AnsweringBackend
from framewise.core.events import EventSink, Failed, Progress, RequestFinished
from framewise.core.resources import asset_path
from framewise.core.settings import AppSettings
from framewise.ui.main_window import MainWindow
from framewise.ui.services import AppServices
from framewise.ui.settings_store import SettingsStore
from framewise.ui.worker import EngineHost

log = logging.getLogger(__name__)

ICON_DIR = asset_path("icons")
DESKTOP_FILE_NAME = "io.github.framewise.Framewise"  # packaging/<this>.desktop; Wayland's app_id must match


def main(argv: Sequence[str] | None = None) -> int:
    """Open the window (optionally on ``CLIP``) and run until it is closed; returns the exit status."""
    args, qt_args = _parser().parse_known_args(sys.argv[1:] if argv is None else list(argv))
    setup_logging()
    log.info("Framewise %s starting", __version__)
    problem = None if QApplication.instance() else display_problem(os.environ, sys.platform)
    if problem:
        log.error("%s", problem)
        print(f"framewise-studio: {problem}", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication([sys.argv[0], *qt_args])
    app.setApplicationName("Framewise")
    app.setOrganizationName("Framewise")
    app.setApplicationDisplayName("Framewise")
    app.setApplicationVersion(__version__)
    app.setDesktopFileName(DESKTOP_FILE_NAME)
    app.setWindowIcon(_app_icon())

    store = SettingsStore(args.settings_file)
    settings = store.load_settings()
    host = EngineHost(create_engine, settings)
    window = MainWindow(host, store, app_services(), settings)
    app.aboutToQuit.connect(window.shutdown)
    _quit_on_interrupt(app)
    if args.quit_after_load or os.environ.get("FRAMEWISE_SMOKE") == "1":
        _quit_when_loaded(app, host)
    window.show()
    window.start()
    if args.clip:
        window.session.open_clip(args.clip)
    return app.exec()


def display_problem(environ: Mapping[str, str], platform: str) -> str | None:
    """Why the window cannot open here (no display server to show it on), or ``None``.

    Qt's own message for this case on Linux is a misleading "xcb-cursor0 is needed" abort.
    """
    if not platform.startswith("linux"):
        return None
    qt_platform = environ.get("QT_QPA_PLATFORM", "")
    if qt_platform and not qt_platform.startswith(("xcb", "wayland")):
        return None  # offscreen, vnc, eglfs, ...: Qt needs no display server
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    return (
        "there is no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set). Start it "
        "from a desktop session, or run it without a visible window with QT_QPA_PLATFORM=offscreen "
        "framewise-studio; the `framewise` command answers questions in a terminal."
    )


def create_engine(settings: AppSettings, sink: EventSink) -> AnsweringBackend:
    """Build the engine the settings' backend names. Runs on the worker thread, so importing torch never blocks the window."""
    sink(Progress("load", 0, 0, "Starting PyTorch"))
    from framewise.core.backends import create_engine

    return create_engine(settings, sink)


def memory_estimate(settings: AppSettings) -> str:
    """Settings ▸ Model's memory line. Imported when first asked: by then the worker thread has
    usually imported torch already, so the window does not wait for it at start."""
    from framewise.core.loading import memory_estimate_text

    return memory_estimate_text(settings)


def app_services() -> AppServices:
    """About-box versions, the log file and the memory estimate, from ``app.diagnostics``,
    ``app.logs`` and core's loading."""
    return AppServices(collect_versions=collect_versions, log_file_path=log_file_path, memory_estimate=memory_estimate)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="framewise-studio", description="Ask Qwen3-VL or Qwen3.5 questions about video clips."
    )
    parser.add_argument("clip", nargs="?", help="a video clip to open at start")
    parser.add_argument(
        "--settings-file", metavar="INI", help="keep settings in this ini file instead of the user's settings store"
    )
    parser.add_argument(
        "--quit-after-load",
        action="store_true",
        help="smoke test: print 'ready' and exit 0 once the model has loaded (exit 1 if it fails); also FRAMEWISE_SMOKE=1",
    )
    return parser


def _quit_when_loaded(app: QApplication, host: EngineHost) -> None:
    """Print ``ready`` and exit 0 when the model has loaded; print the error and exit 1 when it fails."""
    failures: list[str] = []

    def follow(event: object) -> None:
        if isinstance(event, Failed):
            failures.append(event.message)
        if not isinstance(event, RequestFinished) or event.kind != "load":
            return
        if event.ok:
            print("ready", flush=True)
            app.exit(0)
        else:
            print(f"framewise-studio: {failures[-1] if failures else 'the model did not load'}", file=sys.stderr, flush=True)
            app.exit(1)

    host.event.connect(follow)


def _app_icon() -> QIcon:
    icon = QIcon()
    scalable = ICON_DIR / "framewise.svg"
    if scalable.exists():
        icon.addFile(str(scalable))
    for png in sorted(ICON_DIR.glob("framewise-*.png")):
        icon.addFile(str(png))
    return icon


def _quit_on_interrupt(app: QApplication) -> None:
    """Let Ctrl+C in the terminal close the window cleanly (Python only sees signals between Qt events)."""
    signal.signal(signal.SIGINT, lambda *_: app.quit())
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)
    timer.start(250)


if __name__ == "__main__":
    sys.exit(main())
