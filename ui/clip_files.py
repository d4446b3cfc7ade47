"""How clips and pictures reach the window: File ▸ Open, Add to Conversation and Open Recent, and
files dropped on it (Ctrl held: added to the conversation instead of opened)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDragMoveEvent, QDropEvent, QPalette
from PySide6.QtWidgets import QFileDialog, QLabel, QMainWindow, QMenu

from framewise.ui.settings_store import SettingsStore

if TYPE_CHECKING:
    from framewise.ui.session import Session

VIDEO_FILTER = (
    "Clips and pictures (*.mp4 *.mov *.mkv *.webm *.avi *.m4v *.mpg *.mpeg *.wmv *.gif *.png *.jpg *.jpeg *.webp *.bmp);;"
    "Video clips (*.mp4 *.mov *.mkv *.webm *.avi *.m4v *.mpg *.mpeg *.wmv *.gif);;"
    "Pictures (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff);;All files (*)"
)


class ClipFiles(QObject):
    """Opens and adds the files a person picks or drops on ``window`` through ``session``; keeps the
    recent ones in ``store``. :attr:`highlight` covers the window while a file is dragged over it;
    ``message(text)`` is a line for the status bar."""

    message = Signal(str)

    def __init__(self, window: QMainWindow, session: Session, store: SettingsStore) -> None:
        super().__init__(window)
        self._window = window
        self.session = session
        self.store = store
        self.highlight = _drop_highlight(window)
        window.setAcceptDrops(True)
        window.installEventFilter(self)
        session.signals.clip_opened.connect(lambda path: store.add_recent_file(str(Path(path).resolve())))

    def choose_clip(self) -> None:
        path = self._choose("Open a clip or a picture")
        if path:
            self.session.open_clip(path)

    def choose_added_clip(self) -> None:
        path = self._choose("Add a clip or a picture to the conversation")
        if path:
            self.add(path)

    def add(self, path: str) -> None:
        """Add ``path`` to the conversation beside the open items (opens it when none is)."""
        if not self.session.add_clip(path):
            self.message.emit("Wait for the clip or the answer to finish, then add it again")

    def fill_recent_menu(self, menu: QMenu) -> None:
        """List the recent files in ``menu`` (File ▸ Open Recent), each opening its file, then Clear Recent."""
        menu.clear()
        files = self.store.recent_files()
        for path in files:
            action = menu.addAction(Path(path).name, lambda checked=False, path=path: self.session.open_clip(path))
            action.setToolTip(path)
            action.setStatusTip(path)
        if not files:
            menu.addAction("No recent clips").setEnabled(False)
            return
        menu.addSeparator()
        menu.addAction("Clear Recent", self.store.clear_recent_files)

    def _choose(self, caption: str) -> str:
        recent = self.store.recent_files()
        start = str(Path(recent[0]).parent) if recent else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self._window, caption, start, VIDEO_FILTER)
        return path

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        """Take the window's drag and drop events: a local file is opened (or added, Ctrl held)."""
        if isinstance(event, QDragEnterEvent):  # (a kind of QDragMoveEvent, itself a kind of QDropEvent)
            self._drag_entered(event)
        elif isinstance(event, QDragMoveEvent):
            if _local_files(event.mimeData()):
                event.acceptProposedAction()
        elif isinstance(event, QDropEvent):
            self._dropped(event)
        elif isinstance(event, QDragLeaveEvent):
            self.highlight.hide()
        else:
            return False
        return True

    def _drag_entered(self, event: QDragEnterEvent) -> None:
        files = _local_files(event.mimeData())
        if not files:
            event.ignore()
            return
        event.acceptProposedAction()
        name = Path(files[0]).name
        self.highlight.setText(
            f"Drop to add {name} to the conversation" if _adds(event)
            else f"Drop to open {name}\n(hold Ctrl to add it to the conversation instead)"
        )
        self.highlight.setGeometry(self._window.centralWidget().geometry())
        self.highlight.raise_()
        self.highlight.show()

    def _dropped(self, event: QDropEvent) -> None:
        self.highlight.hide()
        files = _local_files(event.mimeData())
        if not files:
            event.ignore()
            return
        event.acceptProposedAction()
        if _adds(event):
            self.add(files[0])
        else:
            self.session.open_clip(files[0])


def _drop_highlight(window: QMainWindow) -> QLabel:
    """A label over ``window``, hidden, that says what a drop will do."""
    label = QLabel(window)
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    label.setWordWrap(True)
    label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    highlight = window.palette().color(QPalette.ColorRole.Highlight)
    label.setStyleSheet(
        f"QLabel {{ background: rgba({highlight.red()}, {highlight.green()}, {highlight.blue()}, 60);"
        f" border: 3px dashed {highlight.name()}; font-size: 16pt; }}"
    )
    label.hide()
    return label


def _adds(event: QDropEvent | QDragEnterEvent) -> bool:
    """A drop with Ctrl held adds its file to the conversation instead of opening it."""
    return bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)


def _local_files(mime) -> list[str]:
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []
