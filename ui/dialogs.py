"""Help ▸ About, Help ▸ Show log, and where exports are offered."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QFontDatabase, QGuiApplication, QShowEvent, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

LOG_TAIL_BYTES = 512 * 1024


def default_export_folder() -> Path:
    """Where exports are offered first: the user's documents folder (home when the platform names none)."""
    folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return Path(folder) if folder and Path(folder).is_dir() else Path.home()


class AboutDialog(QDialog):
    """What Framewise is, and the versions it runs with (from ``AppServices.collect_versions``)."""

    def __init__(self, versions: dict[str, str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Framewise")
        self.versions = dict(versions)
        title = QLabel("Framewise")
        font = title.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        title.setFont(font)
        blurb = QLabel(
            "Ask questions about video clips. Qwen3-VL or Qwen3.5 answers, with its vision encoder run through "
            "CUDA graphs when a GPU is present."
        )
        blurb.setWordWrap(True)
        form = QFormLayout()
        widest_caption = widest_value = 0
        for name, value in self.versions.items():
            label = QLabel(value)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            label.setWordWrap(True)
            form.addRow(f"{name}:", label)
            widest_caption = max(widest_caption, label.fontMetrics().horizontalAdvance(f"{name}:"))
            widest_value = max(widest_value, label.fontMetrics().horizontalAdvance(value))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy versions", QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.versions_text()))
        buttons.rejected.connect(self.reject)
        buttons.accepted.connect(self.accept)
        heading = QHBoxLayout()
        icon = QApplication.windowIcon()
        if not icon.isNull():
            size = round(title.fontMetrics().height() * 2)
            picture = QLabel()
            picture.setPixmap(icon.pixmap(size, size))
            heading.addWidget(picture)
        heading.addWidget(title, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(heading)
        layout.addWidget(blurb)
        layout.addLayout(form)
        layout.addWidget(buttons)
        # Wide enough for every value on one line (a wrapped one can be cut where the form sized its row
        # for one line), within the screen: on a small one the longest still wrap.
        line = self.fontMetrics().height()
        screen = self.screen().availableGeometry().width() if self.screen() else line * 60
        self.setMinimumWidth(min(max(line * 28, widest_caption + widest_value + line * 3), screen * 9 // 10))

    def versions_text(self) -> str:
        return "\n".join(f"{name}: {value}" for name, value in self.versions.items())


class LogDialog(QDialog):
    """The end of Framewise's log file, with Refresh and a button to open it in the system's viewer."""

    def __init__(self, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.path = Path(path)
        self.setWindowTitle("Log")
        self.location = QLabel(str(self.path))
        self.location.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        refresh = buttons.addButton("Refresh", QDialogButtonBox.ButtonRole.ActionRole)
        refresh.clicked.connect(self.reload)
        self.open_button: QPushButton = buttons.addButton("Open Log Folder", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.clicked.connect(
            lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.path.parent)))
        )
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.location)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
        line = self.fontMetrics().height()
        self.resize(line * 60, line * 32)
        self.reload()

    def reload(self) -> None:
        """Show the last ``LOG_TAIL_BYTES`` of the log and scroll to its end."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(0, 2)
                size = handle.tell()
                handle.seek(max(0, size - LOG_TAIL_BYTES))
                content = handle.read().decode("utf-8", errors="replace")
        except OSError as error:
            content = f"No log to show yet ({error.strerror or error})."
        self.text.setPlainText(content)
        self._scroll_to_end()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        # Scrolled in reload() the viewport had not its final size yet: the end would sit below it.
        self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        """Show the newest lines, from their start."""
        self.text.moveCursor(QTextCursor.MoveOperation.End)
        self.text.moveCursor(QTextCursor.MoveOperation.StartOfLine)
        self.text.verticalScrollBar().setValue(self.text.verticalScrollBar().maximum())
        self.text.horizontalScrollBar().setValue(0)
