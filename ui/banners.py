"""Banners across the top of the window for facts a person should know before trusting an answer.

All banners share one :class:`BannerArea`, which shows one at a time (the most important raised one)
with a "1 of 3" count and a button to step to the next, so the window never loses more than one
banner's height to them."""

from __future__ import annotations

import html
import logging
from typing import TYPE_CHECKING, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QStyle, QToolButton, QWidget

from framewise.core.events import EngineInfo, Failed
from framewise.core.settings import AppSettings

if TYPE_CHECKING:
    from framewise.ui.session import Session

log = logging.getLogger(__name__)


class Banner(QFrame):
    """An icon, a message, an optional action button, and a close button. Colours come from the palette.

    Give an action only when it can fix what the banner says."""

    dismissed = Signal()

    def __init__(
        self,
        text: str,
        *,
        icon: QStyle.StandardPixmap = QStyle.StandardPixmap.SP_MessageBoxInformation,
        action_text: str | None = None,
        action: Callable[[], None] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        line = self.fontMetrics().height()
        self.icon = QLabel()
        self.icon.setPixmap(self.style().standardIcon(icon).pixmap(round(line * 1.3), round(line * 1.3)))
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(round(line * 0.6), round(line * 0.35), round(line * 0.35), round(line * 0.35))
        self.row.setSpacing(round(line * 0.6))
        self.row.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        self.row.addWidget(self.label, 1)
        self.action_button: QPushButton | None = None
        if action_text and action:
            self.action_button = QPushButton(action_text)
            self.action_button.clicked.connect(action)
            self.row.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.close_button = QToolButton()
        self.close_button.setAutoRaise(True)
        self.close_button.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_TitleBarCloseButton))
        self.close_button.setToolTip("Hide this message")
        self.close_button.clicked.connect(self.dismissed)
        self.row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)

    def text(self) -> str:
        return self.label.text()

    def set_text(self, text: str) -> None:
        self.label.setText(text)


class BannerArea(QWidget):
    """One row for every banner: the most important raised banner is shown, the others wait behind it.

    ``banners`` are given most important first. :meth:`post` raises a banner (or brings it back after
    it was dismissed), :meth:`dismiss` takes it down; the area hides itself when none is raised."""

    def __init__(self, banners: list[Banner], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.banners = list(banners)
        self._raised: list[Banner] = []
        self._current: Banner | None = None
        self.count_label = QLabel()
        self.next_button = QToolButton()
        self.next_button.setAutoRaise(True)
        self.next_button.setArrowType(Qt.ArrowType.RightArrow)
        self.next_button.setToolTip("Show the next message")
        self.next_button.clicked.connect(self.show_next)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for banner in self.banners:
            banner.hide()
            banner.dismissed.connect(lambda banner=banner: self.dismiss(banner))
            layout.addWidget(banner, 1)
        # The count and the step button sit inside the shown banner's frame, before its close button.
        self.stepper = QWidget(self)
        stepper_row = QHBoxLayout(self.stepper)
        stepper_row.setContentsMargins(0, 0, 0, 0)
        stepper_row.addWidget(self.count_label)
        stepper_row.addWidget(self.next_button)
        self._refresh()

    def raised(self) -> list[Banner]:
        """The banners raised now, most important first."""
        return [banner for banner in self.banners if banner in self._raised]

    def current(self) -> Banner | None:
        """The banner on show, or None when none is raised."""
        return self._current

    def post(self, banner: Banner) -> None:
        """Raise ``banner``; it is shown at once when it is the most important one raised."""
        if banner not in self._raised:
            self._raised.append(banner)
        self._current = self.raised()[0]
        self._refresh()

    def dismiss(self, banner: Banner) -> None:
        """Take ``banner`` down; the next most important raised one (if any) takes its place."""
        if banner in self._raised:
            self._raised.remove(banner)
        if self._current is banner or self._current not in self._raised:
            raised = self.raised()
            self._current = raised[0] if raised else None
        self._refresh()

    def set_raised(self, banner: Banner, raised: bool) -> None:
        """:meth:`post` when ``raised``, else :meth:`dismiss`."""
        if raised:
            self.post(banner)
        else:
            self.dismiss(banner)

    def show_next(self) -> None:
        """Show the raised banner after the one on show (wrapping round)."""
        raised = self.raised()
        if len(raised) > 1 and self._current in raised:
            self._current = raised[(raised.index(self._current) + 1) % len(raised)]
            self._refresh()

    def _refresh(self) -> None:
        raised = self.raised()
        for banner in self.banners:
            banner.setVisible(banner is self._current)
        if self._current is not None:
            row = self._current.row
            row.insertWidget(row.indexOf(self._current.close_button), self.stepper, 0, Qt.AlignmentFlag.AlignTop)
            self.count_label.setText(f"{raised.index(self._current) + 1} of {len(raised)}")
        self.stepper.setVisible(len(raised) > 1)
        self.setVisible(self._current is not None)


class WindowBanners(BannerArea):
    """The main window's banners, most important first: an error, the saved settings that did not load,
    conversations not being kept, the demo model answering, no CUDA graphs on a GPU.

    ``open_settings(section)`` opens Settings (on ``section``'s tab, or the last one for ``None``)
    for the banners whose action is fixing it there. :meth:`follow` connects them to the session."""

    def __init__(self, open_settings: Callable[[str | None], object], parent: QWidget | None = None) -> None:
        warning = QStyle.StandardPixmap.SP_MessageBoxWarning
        error = Banner("", icon=warning, action_text="Settings…", action=lambda: open_settings(None))
        fallback = Banner("", icon=warning, action_text="Settings…", action=lambda: open_settings("model"))
        fallback.label.setTextFormat(Qt.TextFormat.PlainText)
        store = Banner("", icon=warning)
        store.label.setTextFormat(Qt.TextFormat.PlainText)
        demo = Banner("", action_text="Choose a Model…", action=lambda: open_settings("model"))
        cpu = Banner("", icon=QStyle.StandardPixmap.SP_ComputerIcon)
        super().__init__([error, fallback, store, demo, cpu], parent)
        self.error_banner, self.fallback_banner, self.store_banner, self.demo_banner, self.cpu_banner = self.banners

    def follow(self, session: Session) -> None:
        """Raise and take down the banners as the session's errors, settings and engine say."""
        signals = session.signals
        signals.error_raised.connect(self.show_error)
        signals.error_cleared.connect(lambda: self.dismiss(self.error_banner))
        signals.settings_applied.connect(lambda settings: self.dismiss(self.fallback_banner))
        signals.fell_back_to_defaults.connect(self._show_fallback)
        signals.engine_changed.connect(self._show_engine)

    def show_error(self, text: str, settings_can_help: bool = False) -> None:
        """Show ``text`` in the error banner until dismissed or the next success; it offers Settings only
        when ``settings_can_help`` (a model that failed to load can be changed there, a clip that is not a
        video cannot be fixed there)."""
        log.warning("%s", text)
        self.error_banner.set_text(text)
        self.error_banner.label.setTextFormat(Qt.TextFormat.PlainText)
        if self.error_banner.action_button is not None:
            self.error_banner.action_button.setVisible(settings_can_help)
        self.post(self.error_banner)

    def show_settings_problem(self, text: str) -> None:
        """The saved settings were rejected as they were read (``text`` names the field and where the
        file is kept): said until settings are applied, not only until the model loads."""
        self.fallback_banner.set_text(text)
        self.post(self.fallback_banner)

    def show_store_notice(self, text: str) -> None:
        """Why conversations are not being kept (their store could not be opened, or only read)."""
        self.store_banner.set_text(text)
        self.post(self.store_banner)

    def _show_fallback(self, saved: AppSettings, failure: Failed | None) -> None:
        field = failure.field if failure and failure.field else None
        section, _, key = (field or "").partition(".")
        value = saved.to_dict().get(section, {}).get(key) if field else None
        named = f"The saved setting {field} ({value})" if field else "The saved settings"
        self.fallback_banner.set_text(
            f"{named} could not be used: {failure.message if failure else 'the model did not load'} "
            "Framewise started on the demo model with the default settings; your saved settings stay as they "
            "were until you apply new ones in Settings."
        )
        self.post(self.fallback_banner)
        self.dismiss(self.error_banner)

    def _show_engine(self, info: EngineInfo) -> None:
        self.demo_banner.set_text(
            f"Answers come from a small demo model (<b>{html.escape(info.model_label or '')}</b>), bundled so that "
            "Framewise runs anywhere without a download. To ask a real Qwen3-VL, open <b>Settings ▸ Model</b> and "
            "choose a checkpoint folder, or the repo id of one in your Hugging Face cache."
        )
        self.set_raised(self.demo_banner, bool(info.model_label))
        # On a CPU the Encoder panel's title says, once, that there are no CUDA graphs; a banner is kept
        # for a GPU that runs without them, where it is a surprise worth the space.
        if info.graphs_enabled or info.server is not None or info.on_cpu:
            self.dismiss(self.cpu_banner)
        else:
            self.cpu_banner.set_text(f"<b>No CUDA graphs:</b> {html.escape(info.graphs_reason)}.")
            self.cpu_banner.setToolTip(info.graphs_reason)
            self.post(self.cpu_banner)
