"""Exporting a conversation to a file a person chooses: Markdown, or JSON for a ``.json`` name."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtWidgets import QFileDialog, QWidget

from framewise.core.conversation import Conversation
from framewise.core.errors import ExportError
from framewise.core.settings import AppSettings
from framewise.ui.dialogs import default_export_folder


class Exporter:
    """Writes conversations where a person chooses (the file dialog opens over ``parent``); ``say``
    reports the file written, ``warn`` why it could not be."""

    def __init__(self, parent: QWidget, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
        self._parent = parent
        self._say = say
        self._warn = warn

    def choose_and_export(self, conversation: Conversation, settings: AppSettings) -> None:
        """Ask where to export ``conversation`` (answered with ``settings``), starting in the documents folder."""
        name = f"{Path(conversation.clip_name or 'framewise').stem}-conversation.md"
        path, selected = QFileDialog.getSaveFileName(
            self._parent, "Export the conversation", str(default_export_folder() / name), "Markdown (*.md);;JSON (*.json)"
        )
        if not path:
            return
        if not Path(path).suffix:
            path += ".json" if selected.startswith("JSON") else ".md"
        self.export(conversation, settings, Path(path))

    def export(self, conversation: Conversation, settings: AppSettings, path: Path) -> None:
        """Write ``conversation`` to ``path``: JSON for ``.json``, Markdown otherwise."""
        try:
            conversation.export(path, settings)
        except ExportError as error:
            self._warn(str(error))
            return
        self._say(f"Exported the conversation to {path}")
