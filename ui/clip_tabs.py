"""The previews of every item in the conversation, one tab each: the opened clip first, then the
clips, pictures and closer looks added to it. With one item the tab bar hides, so the window looks
as it does with a single clip."""

from __future__ import annotations

from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import QStyle, QTabBar, QTabWidget, QWidget

from framewise.core.events import ClipSampled, EncodeDone
from framewise.ui.frames import ClipPreview


class ClipTabs(QTabWidget):
    """``main`` is the opened clip's preview (tab 0); :meth:`set_items` shows the added ones after it.

    ``look_closer_requested(item, start_s, end_s)``: a span of item ``item``'s timeline is to be
    looked at closer; ``frame_changed(index)``: the shown tab's preview passed another sampled frame;
    ``shown_changed(clip)``: another tab is shown (the frame strip follows it); ``seeked()``: a person
    moved a timeline's playhead.
    """

    look_closer_requested = Signal(int, float, float)
    frame_changed = Signal(int)
    shown_changed = Signal(object)
    seeked = Signal()

    def __init__(self, main: ClipPreview, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.main = main
        self.setTabBar(_TabBar())
        self.setTabBarAutoHide(True)
        self.setDocumentMode(True)
        self.addTab(main, "No clip")
        main.look_closer_requested.connect(lambda start, end: self.look_closer_requested.emit(0, start, end))
        self._follow_frames(main)
        self._added: list[tuple[tuple[ClipSampled, EncodeDone], ClipPreview]] = []
        self.currentChanged.connect(lambda _index: self.shown_changed.emit(self.current_preview().clip))

    def current_preview(self) -> ClipPreview:
        """The preview of the tab shown."""
        current = self.currentWidget()
        return current if isinstance(current, ClipPreview) else self.main

    def _follow_frames(self, preview: ClipPreview) -> None:
        preview.frame_changed.connect(
            lambda index: self.frame_changed.emit(index) if preview is self.current_preview() else None
        )
        preview.timeline.seek_requested.connect(lambda seconds: self.seeked.emit())

    @property
    def added_previews(self) -> list[ClipPreview]:
        return [preview for _, preview in self._added]

    def set_main_title(self, title: str) -> None:
        self.setTabText(0, title)
        self.setTabToolTip(0, title)

    def set_items(self, items: list[tuple[ClipSampled, EncodeDone]]) -> None:
        """Show ``items`` (the added ones, in order: what was sampled and what encoding it reported)
        after the opened clip, keeping the previews of those already shown."""
        if [item for item, _ in self._added] == items[: len(self._added)]:
            items = items[len(self._added):]
        else:
            self._remove_added()
        for item in items:
            self._add(item)

    def _add(self, item: tuple[ClipSampled, EncodeDone]) -> None:
        clip, done = item
        preview = ClipPreview()
        preview.set_clip(clip)
        if done.span is not None:
            preview.timeline.select_span(*done.span)
        index = len(self._added) + 1
        preview.look_closer_requested.connect(lambda start, end: self.look_closer_requested.emit(index, start, end))
        self._follow_frames(preview)
        self._added.append((item, preview))
        self.addTab(preview, done.clip_name)
        self.setTabToolTip(self.count() - 1, done.clip_name)
        self.setCurrentWidget(preview)

    def _remove_added(self) -> None:
        for _, preview in self._added:
            self.removeTab(self.indexOf(preview))
            preview.shutdown()
            preview.deleteLater()
        self._added = []
        self.setCurrentIndex(0)

    def shutdown(self) -> None:
        for preview in (self.main, *self.added_previews):
            preview.shutdown()


class _TabBar(QTabBar):
    """Tabs as tall as their names with the style's shift of the tabs not shown: Fusion draws those
    lower, which cut the underscores off file names ("red square.mp4" for "red_square.mp4")."""

    def tabSizeHint(self, index: int) -> QSize:  # noqa: N802 - Qt override
        size = super().tabSizeHint(index)
        size.setHeight(size.height() + self.style().pixelMetric(QStyle.PixelMetric.PM_TabBarTabShiftVertical, None, self))
        return size
