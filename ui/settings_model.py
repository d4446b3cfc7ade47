"""Settings ▸ Model's own parts: the choice of the model, and the line that says what it will take."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QButtonGroup, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPushButton, QRadioButton, QStyle, QVBoxLayout, QWidget

from framewise.core.settings import DEMO_MODEL, AppSettings
from framewise.ui.queries import LatestQuery, RunQuery
from framewise.ui.settings_fields import dim_label

# How long typing in the model's folder or repo id field pauses before the choice counts as changed.
CHANGED_AFTER_TYPING_MS = 400
ESTIMATING_TEXT = "Estimating the memory the model needs…"


class ModelSourceChoice(QWidget):
    """The bundled demo model, a checkpoint folder (typed or browsed to) or a Hugging Face repo id.

    ``edited()``: a person changed the choice. ``changed()``: the model chosen changed, at once for a
    click or a folder browsed to, once typing pauses for a path or repo id."""

    edited = Signal()
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Radio texts cannot wrap: they stay short and the explanation wraps under them.
        self.demo_radio = QRadioButton("The bundled demo model")
        self.folder_radio = QRadioButton("Checkpoint folder:")
        self.repo_radio = QRadioButton("Hugging Face repo id:")
        self.group = QButtonGroup(self)
        self.folder_edit = QLineEdit()
        self.folder_edit.setPlaceholderText(
            "a folder with config.json and *.safetensors of a Qwen3-VL or Qwen3.5 model"
        )
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._choose_folder)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("e.g. Qwen/Qwen3-VL-2B-Instruct")
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.demo_radio)
        column.addWidget(choice_hint(self.demo_radio, "Tiny: runs anywhere, for trying Framewise out."))
        column.addWidget(self.folder_radio)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder_edit, 1)
        folder_row.addWidget(self.browse_button)
        column.addLayout(folder_row)
        column.addWidget(self.repo_radio)
        column.addWidget(choice_hint(self.repo_radio, "A model already in the local Hugging Face cache."))
        column.addWidget(self.repo_edit)
        self._changed_after_typing = QTimer(self)
        self._changed_after_typing.setSingleShot(True)
        self._changed_after_typing.setInterval(CHANGED_AFTER_TYPING_MS)
        self._changed_after_typing.timeout.connect(self.changed)
        for button in (self.demo_radio, self.folder_radio, self.repo_radio):
            self.group.addButton(button)
            button.clicked.connect(self.edited)
            button.toggled.connect(self.changed)
        for edit, radio in ((self.folder_edit, self.folder_radio), (self.repo_edit, self.repo_radio)):
            edit.textEdited.connect(lambda _text, radio=radio: radio.setChecked(True))
            edit.textEdited.connect(self.edited)
            edit.textEdited.connect(self._changed_after_typing.start)
            edit.editingFinished.connect(self.changed)

    def source(self) -> str:
        """The model chosen, as ``ModelSettings.source`` names it."""
        if self.demo_radio.isChecked():
            return DEMO_MODEL
        if self.folder_radio.isChecked():
            return self.folder_edit.text().strip()
        return self.repo_edit.text().strip()

    def set_source(self, source: str) -> None:
        if source == DEMO_MODEL:
            self.demo_radio.setChecked(True)
        elif _looks_like_folder(source):
            self.folder_radio.setChecked(True)
            self.folder_edit.setText(source)
        else:
            self.repo_radio.setChecked(True)
            self.repo_edit.setText(source)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Choose a Qwen3-VL or Qwen3.5 checkpoint folder", self.folder_edit.text()
        )
        if folder:
            self.folder_edit.setText(folder)
            self.folder_radio.setChecked(True)
            self.edited.emit()
            self.changed.emit()


class MemoryEstimateLine(QLabel):
    """What the chosen model will take on its device, worded by ``estimate(settings)`` run through
    ``run_query`` (off the GUI thread): "Estimating…" until the estimate of the settings last asked
    about comes back; one of settings asked about earlier is dropped (the same settings asked about
    again while their estimate is on its way are not asked twice). Hidden when there is none."""

    def __init__(self, estimate: Callable[[AppSettings], str] | None, run_query: RunQuery) -> None:
        super().__init__()
        self.setWordWrap(True)
        self._estimate = estimate
        self._latest = LatestQuery(run_query)
        self._pending: AppSettings | None = None  # the settings whose estimate is on its way

    def estimate(self, settings: AppSettings | None) -> None:
        """Estimate what ``settings`` (``None``: not valid ones) will take."""
        estimate = self._estimate
        if estimate is None or settings is None:
            self._latest.forget()
            self._pending = None
            self._show("")
            return
        if settings == self._pending:
            return
        self._pending = settings
        self._show(ESTIMATING_TEXT)
        self._latest.ask(lambda: estimate(settings), self._answered)

    def _answered(self, text: str) -> None:
        self._pending = None
        self._show(text)

    def _show(self, text: str) -> None:
        self.setText(text)
        self.setVisible(bool(text))


def choice_hint(button: QRadioButton, text: str) -> QLabel:
    """A dim, wrapping explanation of ``button``, indented to line up with its text."""
    hint = dim_label(text)
    style = button.style()
    indent = style.pixelMetric(QStyle.PixelMetric.PM_ExclusiveIndicatorWidth, None, button) + style.pixelMetric(
        QStyle.PixelMetric.PM_RadioButtonLabelSpacing, None, button
    )
    hint.setContentsMargins(indent, 0, 0, 0)
    return hint


def _looks_like_folder(source: str) -> bool:
    path = Path(source).expanduser()
    return path.is_absolute() or source.startswith((".", "~")) or path.is_dir()
