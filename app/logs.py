"""Framewise's log file: one rotating file in the user's log folder.

    Linux    $XDG_STATE_HOME/framewise/log  (default ~/.local/state/framewise/log)
    macOS    ~/Library/Logs/Framewise
    Windows  %LOCALAPPDATA%\\Framewise\\Logs

FRAMEWISE_LOG_DIR overrides the folder (tests, portable installs). The window's Help ▸ Show log
opens log_file_path().
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import threading
from pathlib import Path
from types import TracebackType

from framewise.core.errors import set_log_file
from framewise.core.user_folders import user_folder

LOG_FILE_NAME = "framewise.log"
MAX_BYTES = 1_000_000
BACKUP_COUNT = 5
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"

logger = logging.getLogger(__name__)


def log_dir() -> Path:
    """The folder that holds framewise.log and its rotated backups (not created here)."""
    return user_folder("FRAMEWISE_LOG_DIR", "log")


def log_file_path() -> Path:
    """The current log file; backups beside it are framewise.log.1 (newest) ... .5."""
    return log_dir() / LOG_FILE_NAME


class _FramewiseFileHandler(logging.handlers.RotatingFileHandler):
    """Marks the handler setup_logging() installed, so a second call replaces it instead of adding one."""


def setup_logging(
    level: int | str = logging.INFO,
    *,
    max_bytes: int = MAX_BYTES,
    backup_count: int = BACKUP_COUNT,
) -> Path:
    """Send the root logger to the rotating log file, and log uncaught exceptions there too.

    Safe to call again (for example with another level): the previous Framewise handler is closed
    and replaced. Returns the log file's path.
    """
    path = log_file_path()
    path.parent.mkdir(parents=True, exist_ok=True)

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _FramewiseFileHandler)]:
        root.removeHandler(handler)
        handler.close()

    handler = _FramewiseFileHandler(path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    _log_uncaught_exceptions()
    set_log_file(path)
    logger.info("logging to %s", path)
    return path


def _log_uncaught_exceptions() -> None:
    """Write uncaught exceptions (main and other threads) to the log before the default handling.

    A desktop launch has no terminal, so without this a crash would leave no trace.
    """
    if getattr(sys.excepthook, "_framewise", False):
        return
    previous_hook = sys.excepthook
    previous_thread_hook = threading.excepthook

    def hook(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            logger.critical("uncaught exception", exc_info=(kind, value, traceback))
        previous_hook(kind, value, traceback)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            thread_name = args.thread.name if args.thread else "?"
            logger.critical(
                "uncaught exception in thread %s", thread_name, exc_info=(args.exc_type, args.exc_value, args.exc_traceback)
            )
        previous_thread_hook(args)

    hook._framewise = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    threading.excepthook = thread_hook
