"""The Clip section of the window: the preview of every item in the conversation (one tab each), the
strip of sampled frames of the tab shown, and a title line that describes that item (once it is
encoded, with its video tokens, before → after where pruning dropped some)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QWidget

from framewise.core.clip_times import PlacedTime
from framewise.core.events import ClipSampled, EncodeDone
from framewise.core.wording import plural
from framewise.ui.clip_tabs import ClipTabs
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.frame_strip import FrameStrip
from framewise.ui.frames import ClipPreview, format_timestamp
from framewise.ui.section import Section

if TYPE_CHECKING:
    from framewise.ui.session import Session


class ClipSection(Section):
    """:attr:`preview` (the opened clip's, the first of :attr:`tabs`), :attr:`strip` and :attr:`title`.

    The strip and the title follow the tab shown, and ``clip_shown(clip)`` says which clip that is
    (``None``: none); ``message(text)`` is a line for the status bar, ``note(text)`` one about the
    moment shown, until the next seek ("" ends it)."""

    message = Signal(str)
    note = Signal(str)
    clip_shown = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        title = ElidedLabel("No clip")
        title.setTextFormat(Qt.TextFormat.PlainText)
        preview = ClipPreview()
        tabs = ClipTabs(preview)
        strip = FrameStrip()
        super().__init__("Clip", title, tabs, strip, fixed_height=(strip,), parent=parent)
        self.title, self.preview, self.tabs, self.strip = title, preview, tabs, strip
        self._summary_of: Callable[[ClipSampled | None], EncodeDone | None] = lambda clip: None
        tabs.frame_changed.connect(strip.select_frame)
        tabs.shown_changed.connect(self._show_tab_clip)
        strip.frame_selected.connect(lambda index: tabs.current_preview().seek(index))
        for moved in (strip.frame_selected, tabs.seeked, tabs.shown_changed):
            moved.connect(lambda *_: self.note.emit(""))

    def height_for_width(self, width: int) -> int:
        """The height that shows a 16:9 frame ``width`` pixels across, with the header, the preview's
        controls, the tab bar (when shown) and the strip."""
        return self.minimumSizeHint().height() - self.preview.view.minimumHeight() + round(width * 9 / 16)

    def follow(self, session: Session) -> None:
        """Show the clip the session shows and the items of its conversation; a span chosen on a
        timeline is looked at closer through it."""
        signals = session.signals
        self._summary_of = session.summary_of
        signals.clip_changed.connect(self._show_clip)
        signals.clip_encoded.connect(lambda done: self._show_summary(self.tabs.current_preview().clip))
        signals.conversation_reset.connect(lambda conversation, notice: self.tabs.set_items(session.added))
        signals.item_added.connect(lambda clip, done: self.tabs.set_items(session.added))
        self.tabs.look_closer_requested.connect(
            lambda item, start_s, end_s: session.look_closer(start_s, end_s, item)
            or self.message.emit("Wait for the clip or the answer to finish, then look closer again")
        )

    def show_moment(self, start_s: float, end_s: float | None) -> None:
        """A time clicked in the conversation: the preview shown goes there (a range is selected on
        its timeline) and the strip selects the sampled frame nearest it."""
        preview = self.tabs.current_preview()
        nearest = preview.show_moment(start_s, end_s)
        if nearest < 0:
            return
        self.strip.select_frame(nearest)
        clip = preview.clip
        if clip is not None and start_s > clip.duration_s:
            self.note.emit(f"{format_timestamp(start_s)} is past the clip's end ({format_timestamp(clip.duration_s)})")
        else:
            self.note.emit("")

    def show_question_times(self, times: list[PlacedTime]) -> None:
        """Outline the times of the question being typed on the timelines: each on its item's tab, an
        untied one on every tab (it would go to the tab shown)."""
        for index, preview in enumerate((self.tabs.main, *self.tabs.added_previews)):
            preview.timeline.set_question_times([placed.time for placed in times if placed.item in (None, index)])

    def show_item_moment(self, item: int, start_s: float, end_s: float | None) -> None:
        """A time the answer tied to item ``item`` (its tab) was clicked: that tab is shown and goes there."""
        if 0 <= item < self.tabs.count():
            self.tabs.setCurrentIndex(item)
        self.show_moment(start_s, end_s)

    def _show_clip(self, clip: ClipSampled | None) -> None:
        self.preview.set_clip(clip)
        self.tabs.set_main_title(clip.clip_name if clip else "No clip")
        if self.tabs.current_preview() is self.preview:
            self._show_tab_clip(clip)

    def _show_tab_clip(self, clip: ClipSampled | None) -> None:
        """Another preview tab is shown: the frame strip and the title follow it."""
        self.strip.set_clip(clip)
        self.clip_shown.emit(clip)
        self._show_summary(clip)

    def _show_summary(self, clip: ClipSampled | None) -> None:
        """The title line for ``clip``: its name, size, length and frames, and once it is encoded its
        tokens; the strip marks how much of each frame pruning kept."""
        summary = self._summary_of(clip)
        self.strip.show_kept(summary.kept_per_frame if summary is not None else ())
        if clip is None:
            self.title.setText("No clip")
            self.title.setToolTip("")
            return
        if clip.kind == "image":
            details = "picture"
        else:
            fast = " · fast mode" if clip.sampling_mode == "fast" else ""
            details = f"{format_timestamp(clip.duration_s)} · {plural(len(clip.timestamps), 'frame')}{fast}"
        tokens = summary.tokens_text() if summary is not None else ""
        words = [clip.clip_name, f"{clip.width}×{clip.height}", details, *([tokens] if tokens else [])]
        self.title.setText(" · ".join(words))
        self.title.setToolTip(f"{clip.path}\n{tokens}" if tokens else clip.path)  # the title may be cut short
