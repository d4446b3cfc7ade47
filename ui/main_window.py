"""Framewise's main window: the clip (preview and sampled frames), the live encoder view, and the chat.

The window never calls the engine, and keeps no state of its own beyond its widgets: its
:class:`~framewise.ui.session.Session` sends requests to :class:`~framewise.ui.worker.EngineHost`,
follows the events that come back, and tells the window (a
:class:`~framewise.ui.session.SessionListener`) what to redraw. Its
:class:`~framewise.ui.conversation_keeper.ConversationKeeper` writes the conversations to disk and
fills the Past conversations list.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QProgressBar,
    QSplitter,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from framewise.core.conversation import Conversation, Turn
from framewise.core.conversation_store import ConversationStore
from framewise.core.errors import ExportError, SettingsError
from framewise.core.events import (
    AnswerSpeed,
    AnswerStats,
    ChunkStats,
    ClipSampled,
    EncodeDone,
    EncoderMetrics,
    EngineInfo,
    Failed,
    FramesRead,
)
from framewise.core.settings import AppSettings
from framewise.ui.banners import Banner, BannerArea
from framewise.ui.chat import ChatPanel
from framewise.ui.clip_tabs import ClipTabs
from framewise.ui.conversation_keeper import ConversationKeeper
from framewise.ui.conversation_list import ConversationList
from framewise.ui.dialogs import AboutDialog, LogDialog, default_export_folder
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.frames import ClipPreview, FrameStrip, format_timestamp
from framewise.ui.metrics import EncoderPanel, live_speed_text
from framewise.ui.section import Section
from framewise.ui.services import AppServices
from framewise.ui.session import Session, SessionListener, encoder_text, engine_text, held_memory_text, model_text
from framewise.ui.settings_dialog import SettingsDialog
from framewise.ui.settings_store import SettingsStore
from framewise.ui.worker import EngineHost

log = logging.getLogger(__name__)

DEFAULT_SIZE = (1280, 800)
# Below this width the Past conversations list starts hidden, below this height the Encoder panel starts
# collapsed: at 1024×640 the clip and the conversation come first.
ROOMY_SIZE = (1280, 720)
CPU_ENCODER_TITLE = "eager on the CPU: no CUDA graphs"
VIDEO_FILTER = (
    "Clips and pictures (*.mp4 *.mov *.mkv *.webm *.avi *.m4v *.mpg *.mpeg *.wmv *.gif *.png *.jpg *.jpeg *.webp *.bmp);;"
    "Video clips (*.mp4 *.mov *.mkv *.webm *.avi *.m4v *.mpg *.mpeg *.wmv *.gif);;"
    "Pictures (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff);;All files (*)"
)


class MainWindow(QMainWindow, SessionListener):
    """The window. ``host`` runs the engine; ``store`` keeps settings and recent files; ``services``
    gives the About versions and the log path. Its state is :attr:`session`'s."""

    def __init__(
        self,
        host: EngineHost,
        store: SettingsStore,
        services: AppServices,
        settings: AppSettings,
        conversation_store: ConversationStore | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.store = store
        self.services = services
        self._settings_dialog: SettingsDialog | None = None
        self._shut_down = False
        self.session = Session(host, settings, listener=self)

        self.setWindowTitle("Framewise")
        self.setAcceptDrops(True)
        self._build_widgets()
        self._build_history(conversation_store)
        self._build_menus()
        self._build_status_bar()
        self._restore_geometry()

        host.event.connect(self.session.handle)
        if store.load_problem:
            self.show_error(store.load_problem)

    @property
    def settings(self) -> AppSettings:
        """The applied settings."""
        return self.session.settings

    @property
    def info(self) -> EngineInfo | None:
        """What the engine runs on, once a model has loaded."""
        return self.session.info

    @property
    def clip(self) -> ClipSampled | None:
        """The engine's open clip."""
        return self.session.clip

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def operation(self) -> str | None:
        """The engine request running now (``"load"``, ``"open_clip"``, ``"ask"``, ...), or ``None`` when idle."""
        return self.session.operation

    @property
    def settings_dialog(self) -> SettingsDialog | None:
        """The settings dialog once it has been opened."""
        return self._settings_dialog

    @property
    def opening_clip(self) -> bool:
        """True from asking to open a clip until the engine has encoded it (or failed to)."""
        return self.session.opening_clip

    # -- layout -----------------------------------------------------------------------------

    def _build_widgets(self) -> None:
        line = self.fontMetrics().height()
        self.demo_banner = Banner(
            "",
            action_text="Choose a Model…",
            action=lambda: self.open_settings("model"),
        )
        self.cpu_banner = Banner("", icon=QStyle.StandardPixmap.SP_ComputerIcon)
        self.error_banner = Banner(
            "",
            icon=QStyle.StandardPixmap.SP_MessageBoxWarning,
            action_text="Settings…",
            action=lambda: self.open_settings(None),
        )
        self.fallback_banner = Banner(
            "",
            icon=QStyle.StandardPixmap.SP_MessageBoxWarning,
            action_text="Settings…",
            action=lambda: self.open_settings("model"),
        )
        self.fallback_banner.label.setTextFormat(Qt.TextFormat.PlainText)
        self.store_banner = Banner("", icon=QStyle.StandardPixmap.SP_MessageBoxWarning)
        self.store_banner.label.setTextFormat(Qt.TextFormat.PlainText)
        self.banners = BannerArea(
            [self.error_banner, self.fallback_banner, self.store_banner, self.demo_banner, self.cpu_banner]
        )

        self.clip_title = ElidedLabel("No clip")
        self.clip_title.setTextFormat(Qt.TextFormat.PlainText)
        self.preview = ClipPreview()
        self.clip_tabs = ClipTabs(self.preview)
        self.clip_tabs.look_closer_requested.connect(self.look_closer)
        self.frame_strip = FrameStrip()
        self.clip_tabs.frame_changed.connect(self.frame_strip.select_frame)
        self.clip_tabs.shown_changed.connect(self._show_tab_clip)
        self.frame_strip.frame_selected.connect(lambda index: self.clip_tabs.current_preview().seek(index))
        clip_box = Section("Clip", self.clip_title, self.clip_tabs, self.frame_strip, fixed_height=(self.frame_strip,))

        self.encoder_panel = EncoderPanel()
        self.encoder_title = ElidedLabel("")
        self.encoder_section = Section("Encoder", self.encoder_title, self.encoder_panel, collapsible=True)

        self.chat = ChatPanel()
        self.chat.question_edit.setAcceptDrops(False)
        self.chat.ask_requested.connect(self.ask)
        self.chat.stop_requested.connect(self.stop)
        self.chat.time_clicked.connect(self.show_moment)
        self.chat.item_time_clicked.connect(self.show_item_moment)
        self.chat.question_times_changed.connect(self.preview.timeline.set_question_times)
        self.chat_title = ElidedLabel("")
        chat_box = Section("Conversation", self.chat_title, self.chat)

        self.left_splitter = QSplitter(Qt.Orientation.Vertical)
        self.left_splitter.addWidget(clip_box)
        self.left_splitter.addWidget(self.encoder_section)
        self.left_splitter.setStretchFactor(0, 1)
        self.left_splitter.setStretchFactor(1, 1)
        self.left_splitter.setChildrenCollapsible(False)
        self.encoder_section.collapsed_changed.connect(self._share_left_height)
        self.main_splitter = QSplitter(Qt.Orientation.Horizontal)
        self.main_splitter.addWidget(self.left_splitter)
        self.main_splitter.addWidget(chat_box)
        self.main_splitter.setStretchFactor(0, 11)
        self.main_splitter.setStretchFactor(1, 9)
        self.main_splitter.setChildrenCollapsible(False)

        central = QWidget()
        layout = QVBoxLayout(central)
        margin = round(line * 0.6)
        layout.setContentsMargins(margin, margin, margin, round(line * 0.3))
        layout.setSpacing(round(line * 0.5))
        layout.addWidget(self.banners)
        layout.addWidget(self.main_splitter, 1)
        self.setCentralWidget(central)
        self.drop_highlight = QLabel(self)
        self.drop_highlight.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.drop_highlight.setWordWrap(True)
        self.drop_highlight.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        highlight = self.palette().color(QPalette.ColorRole.Highlight)
        self.drop_highlight.setStyleSheet(
            f"QLabel {{ background: rgba({highlight.red()}, {highlight.green()}, {highlight.blue()}, 60);"
            f" border: 3px dashed {highlight.name()}; font-size: 16pt; }}"
        )
        self.drop_highlight.hide()
        self.main_splitter.setSizes([11 * DEFAULT_SIZE[0] // 20, 9 * DEFAULT_SIZE[0] // 20])
        self.left_splitter.setSizes([DEFAULT_SIZE[1] // 2, DEFAULT_SIZE[1] // 2])

    def _share_left_height(self, encoder_collapsed: bool) -> None:
        """Half the left side for the Encoder panel when it is shown; its header line only when collapsed."""
        total = sum(self.left_splitter.sizes())
        encoder = self.encoder_section.maximumHeight() if encoder_collapsed else total // 2
        self.left_splitter.setSizes([total - encoder, encoder])

    def _build_history(self, conversation_store: ConversationStore | None) -> None:
        """The Past conversations dock, and the keeper that writes conversations and fills it."""
        self.history = ConversationList()
        self.history.open_requested.connect(self.open_kept_conversation)
        self.history.export_requested.connect(self.choose_kept_export_path)
        self.history.delete_requested.connect(self.delete_kept_conversation)
        self.history_dock = QDockWidget("Past conversations", self)
        self.history_dock.setObjectName("history")
        self.history_dock.setWidget(self.history)
        self.history_dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetClosable | QDockWidget.DockWidgetFeature.DockWidgetMovable
        )
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.history_dock)
        self.keeper = ConversationKeeper(self.history, self.show_error, conversation_store)
        if self.keeper.notice:
            self.store_banner.set_text(self.keeper.notice)
            self.banners.post(self.store_banner)
        self.keeper.start(self.conversation)

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.open_action = _action(self, "&Open Clip…", QKeySequence.StandardKey.Open, self.choose_clip)
        file_menu.addAction(self.open_action)
        self.add_action = _action(self, "&Add to Conversation…", "Ctrl+Shift+O", self.choose_added_clip)
        self.add_action.setStatusTip("Add a clip or a picture beside the open one; the conversation goes on about both")
        file_menu.addAction(self.add_action)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        file_menu.addSeparator()
        self.export_action = _action(self, "&Export Conversation…", "Ctrl+Shift+E", self.choose_export_path)
        file_menu.addAction(self.export_action)
        file_menu.addSeparator()
        file_menu.addAction(_action(self, "&Quit", "Ctrl+Q", self.close))

        edit_menu = self.menuBar().addMenu("&Edit")
        self.copy_answer_action = _action(self, "&Copy Last Answer", "Ctrl+Shift+C", self.copy_last_answer)
        edit_menu.addAction(self.copy_answer_action)
        edit_menu.addSeparator()
        self.settings_action = _action(self, "&Settings…", "Ctrl+,", lambda: self.open_settings(None))
        self.settings_action.setMenuRole(QAction.MenuRole.PreferencesRole)
        edit_menu.addAction(self.settings_action)

        chat_menu = self.menuBar().addMenu("&Conversation")
        self.ask_action = _action(self, "&Ask", "Ctrl+Return", self.chat.submit)
        self.stop_action = _action(self, "S&top", "Esc", self.stop)
        self.new_conversation_action = _action(self, "&New Conversation", QKeySequence.StandardKey.New, self.new_conversation)
        for action in (self.ask_action, self.stop_action, self.new_conversation_action):
            chat_menu.addAction(action)
        chat_menu.addSeparator()
        self.history_action = self.history_dock.toggleViewAction()
        self.history_action.setText("&Past Conversations")
        self.history_action.setShortcut(QKeySequence("Ctrl+Shift+H"))
        chat_menu.addAction(self.history_action)

        help_menu = self.menuBar().addMenu("&Help")
        self.show_log_action = _action(self, "Show &Log", None, self.show_log)
        self.about_action = _action(self, "&About Framewise", None, self.show_about)
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)
        help_menu.addAction(self.show_log_action)
        help_menu.addAction(self.about_action)

    def _build_status_bar(self) -> None:
        self.status_label = ElidedLabel("Starting…")
        self.status_label.setTextFormat(Qt.TextFormat.PlainText)
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(self.fontMetrics().height() * 14)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.hide()
        self.engine_label = ElidedLabel("")
        self.engine_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        status = self.statusBar()
        status.setSizeGripEnabled(False)
        status.addWidget(self.status_label, 1)
        status.addPermanentWidget(self.progress_bar)
        status.addPermanentWidget(self.engine_label, 1)

    def _restore_geometry(self) -> None:
        geometry = self.store.window_geometry()
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(*DEFAULT_SIZE)
        self._fit_to_screen()
        self._arrange_for_size()

    def _arrange_for_size(self) -> None:
        """Decide what the window shows first at its opening size: on a small screen the clip and the
        conversation; the Encoder panel (collapsed to its header) and the list are a click away."""
        if self.width() < ROOMY_SIZE[0]:
            self.history_dock.hide()
        if self.height() < ROOMY_SIZE[1]:
            self.encoder_section.set_collapsed(True)
        # The list is as wide as a clip's name and its first question read comfortably, and no wider.
        line = self.fontMetrics().height()
        width = min(max(line * 11, self.width() // 6), line * 20)
        self.resizeDocks([self.history_dock], [width], Qt.Orientation.Horizontal)

    def _fit_to_screen(self) -> None:
        """Open maximized where the window, with its title bar and frame, would not fit its screen's free
        area (a small screen, or geometry saved on a larger one): the window manager then fits the frame too."""
        screen = self.screen()
        if screen is None:
            return
        available = screen.availableGeometry()
        frame = self._frame_allowance()
        if self.width() + frame.width() > available.width() or self.height() + frame.height() > available.height():
            self.resize(min(self.width(), available.width()), min(self.height(), available.height()))
            self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)

    def _frame_allowance(self) -> QSize:
        """What the window manager adds around the window: measured once it is shown; before that (a first
        start) a title bar and borders of the style's size, since the real ones are not known yet."""
        measured = self.frameGeometry().size() - self.geometry().size()
        if measured.width() > 0 or measured.height() > 0:
            return measured
        style = self.style()
        border = style.pixelMetric(QStyle.PixelMetric.PM_MdiSubWindowFrameWidth)
        title = style.pixelMetric(QStyle.PixelMetric.PM_TitleBarHeight)
        return QSize(2 * border, title + 2 * border)

    # -- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        """Ask the worker to load the model; progress and banners follow as events arrive."""
        self.session.start()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Save the window's geometry, cancel engine work and stop the worker thread (idempotent)."""
        if self._shut_down:
            return
        self._shut_down = True
        self.store.save_window_geometry(self.saveGeometry())
        self.clip_tabs.shutdown()
        self.set_status("Stopping…")
        self.host.shutdown()

    # -- clips ------------------------------------------------------------------------------

    def choose_clip(self) -> None:
        recent = self.store.recent_files()
        start = str(Path(recent[0]).parent) if recent else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open a clip or a picture", start, VIDEO_FILTER)
        if path:
            self.open_clip(path)

    def open_clip(self, path: str) -> None:
        """Decode, sample and encode ``path`` on the worker; the conversation restarts once it is encoded."""
        self.session.open_clip(path)

    def choose_added_clip(self) -> None:
        recent = self.store.recent_files()
        start = str(Path(recent[0]).parent) if recent else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Add a clip or a picture to the conversation", start, VIDEO_FILTER)
        if path:
            self.add_clip(path)

    def add_clip(self, path: str) -> None:
        """Add ``path`` to the conversation beside the open items (opens it when none is)."""
        if not self.session.add_clip(path):
            self.set_status("Wait for the clip or the answer to finish, then add it again")

    def look_closer(self, item: int, start_s: float, end_s: float) -> None:
        """Sample ``start_s``..``end_s`` of item ``item`` densely and add it to the conversation."""
        if not self.session.look_closer(start_s, end_s, item):
            self.set_status("Wait for the clip or the answer to finish, then look closer again")

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        files = _local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self._show_drop_highlight(Path(files[0]).name, _adds(event))
        else:
            event.ignore()

    def dragLeaveEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.drop_highlight.hide()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        if _local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        self.drop_highlight.hide()
        files = _local_files(event.mimeData())
        if not files:
            event.ignore()
            return
        event.acceptProposedAction()
        if _adds(event):
            self.add_clip(files[0])
        else:
            self.open_clip(files[0])

    def _show_drop_highlight(self, name: str, adds: bool = False) -> None:
        """Cover the window with a highlight saying what a drop will do."""
        self.drop_highlight.setText(
            f"Drop to add {name} to the conversation" if adds
            else f"Drop to open {name}\n(hold Ctrl to add it to the conversation instead)"
        )
        self.drop_highlight.setGeometry(self.centralWidget().geometry())
        self.drop_highlight.raise_()
        self.drop_highlight.show()

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = self.store.recent_files()
        for path in files:
            action = self.recent_menu.addAction(Path(path).name, lambda checked=False, path=path: self.open_clip(path))
            action.setToolTip(path)
            action.setStatusTip(path)
        if not files:
            self.recent_menu.addAction("No recent clips").setEnabled(False)
            return
        self.recent_menu.addSeparator()
        self.recent_menu.addAction("Clear Recent", self.store.clear_recent_files)

    def clip_shown(self, clip: ClipSampled | None) -> None:
        self.preview.set_clip(clip)
        if self.clip_tabs.current_preview() is self.preview:
            self.frame_strip.set_clip(clip)
        self.clip_tabs.set_main_title(clip.clip_name if clip else "No clip")
        if self.clip_tabs.current_preview() is self.preview:
            self._set_clip_title(clip)
        self.setWindowTitle(f"{clip.clip_name} — Framewise" if clip else "Framewise")

    def frames_read(self, frames: FramesRead) -> None:
        if self.clip_tabs.current_preview() is self.preview:
            self.frame_strip.add_frames(frames)

    def _show_tab_clip(self, clip: ClipSampled | None) -> None:
        """Another preview tab is shown: the frame strip and the clip header follow it."""
        self.frame_strip.set_clip(clip)
        self._set_clip_title(clip)

    def _set_clip_title(self, clip: ClipSampled | None) -> None:
        if clip is None:
            self.clip_title.setText("No clip")
            self.clip_title.setToolTip("")
            return
        if clip.kind == "image":
            details = "picture"
        else:
            fast = " · fast mode" if clip.sampling_mode == "fast" else ""
            details = f"{format_timestamp(clip.duration_s)} · {len(clip.timestamps)} frames{fast}"
        self.clip_title.setText(f"{clip.clip_name} · {clip.width}×{clip.height} · {details}")
        self.clip_title.setToolTip(clip.path)

    # -- questions --------------------------------------------------------------------------

    def ask(self, question: str) -> None:
        """Send ``question`` (a follow-up when the conversation has turns) and stream its answer."""
        self.session.ask(question)

    def stop(self) -> None:
        """Cancel the answer being written or the clip being encoded (``engine.cancel`` is thread-safe)."""
        self.session.stop()

    def new_conversation(self) -> None:
        """Start afresh about the open clip; the chat empties when the engine has forgotten the conversation."""
        self.session.new_conversation()

    def show_moment(self, start_s: float, end_s: float | None) -> None:
        """A time clicked in the conversation: the preview shown goes there (a range is selected on
        its timeline) and the strip selects the sampled frame nearest it."""
        preview = self.clip_tabs.current_preview()
        nearest = preview.show_moment(start_s, end_s)
        if nearest < 0:
            return
        self.frame_strip.select_frame(nearest)
        clip = preview.clip
        if clip is not None and start_s > clip.duration_s:
            self.set_status(f"{format_timestamp(start_s)} is past the clip's end ({format_timestamp(clip.duration_s)})")

    def show_item_moment(self, item: int, start_s: float, end_s: float | None) -> None:
        """A time the answer tied to item ``item`` (its tab) was clicked: that tab is shown and goes there."""
        if 0 <= item < self.clip_tabs.count():
            self.clip_tabs.setCurrentIndex(item)
        self.show_moment(start_s, end_s)

    def _item_names(self) -> list[str]:
        """The names of the conversation's items, in the order of their tabs."""
        return [item.name for item in self.session.conversation_items()]

    def copy_last_answer(self) -> None:
        cards = self.chat.answer_cards()
        if cards:
            cards[-1].copy_text()

    # -- export -----------------------------------------------------------------------------

    def choose_export_path(self) -> None:
        name = f"{Path(self.conversation.clip_name or 'framewise').stem}-conversation.md"
        path = _choose_export_file(self, name)
        if path is not None:
            self.export_conversation(path)

    def choose_kept_export_path(self, conversation_id: int) -> None:
        kept = self.keeper.open(conversation_id)
        if kept is None:
            return
        name = f"{Path(kept.conversation.clip_name or 'framewise').stem}-conversation.md"
        path = _choose_export_file(self, name)
        if path is not None:
            self._export(kept.conversation, kept.settings, path)

    def export_conversation(self, path: Path) -> None:
        """Write the conversation to ``path``: JSON for ``.json``, Markdown otherwise."""
        self._export(self.conversation, self.settings, path)

    def _export(self, conversation: Conversation, settings: AppSettings, path: Path) -> None:
        try:
            conversation.export(path, settings)
        except ExportError as error:
            self.show_error(str(error))
            return
        self.set_status(f"Exported the conversation to {path}")

    # -- kept conversations -----------------------------------------------------------------

    def open_kept_conversation(self, conversation_id: int) -> None:
        """Show a kept conversation and open its clip again (re-encoding it) when the file is still there."""
        if self.conversation.current is not None or self.opening_clip:
            self.set_status("Wait for the answer or the clip to finish before opening another conversation.")
            return
        kept = self.keeper.open(conversation_id)
        if kept is None:
            return
        self.keeper.resume(conversation_id, kept.conversation)
        self.chat.clear()
        for turn in kept.conversation.turns:
            self.chat.start_turn(turn, "")
            # Only the kept clip is opened again: its times link to its tab, the others' to the tab shown.
            self.chat.finish_turn(turn, [kept.conversation.clip_name or ""])
        clip_path = kept.conversation.clip_path
        if self.session.resume(kept.conversation):
            self.chat.add_notice(
                f"Kept conversation about {kept.conversation.clip_name}: its clip is opened again, "
                "and the model answers what comes next without the earlier answers."
            )
        else:
            self.chat.add_notice(
                f"The clip of this conversation is no longer at {clip_path}; it can be read and exported, not continued."
            )
        self.history.select(conversation_id)

    def delete_kept_conversation(self, conversation_id: int) -> None:
        if conversation_id == self.keeper.conversation_id:
            if self.conversation.current is not None:
                self.set_status("Wait for the answer to finish before deleting this conversation.")
                return
            self.new_conversation()
        self.keeper.delete(conversation_id)

    def _end_turn(self, turn: Turn) -> None:
        """A turn ended (done, stopped or failed): show it, keep it, and log its size and timing."""
        self.chat.finish_turn(turn, self._item_names())
        self.keeper.finished(turn)
        stats = turn.stats
        if stats is not None:
            frames = len(self.clip.timestamps) if self.clip else 0
            log.info(
                "answer %s: %d tokens, first token %.0f ms, %.1f tokens/s, %d frames",
                turn.status, stats.new_tokens, stats.time_to_first_token_ms, stats.tokens_per_second, frames,
            )
        else:
            log.info("answer %s: %d characters", turn.status, len(turn.answer))

    # -- settings ---------------------------------------------------------------------------

    def open_settings(self, section: str | None) -> SettingsDialog:
        """Show the settings dialog (on ``section``'s tab when given) filled with the applied settings."""
        if self._settings_dialog is None:
            self._settings_dialog = SettingsDialog(
                self.settings, self, api_key_note=self.store.api_key_note(),
                memory_estimate=self.services.memory_estimate,
            )
            self._settings_dialog.settings_applied.connect(self.apply_settings)
        else:
            self._settings_dialog.set_settings(self.settings)
        info = self.info
        on_cpu = info is not None and info.on_cpu
        self._settings_dialog.set_limits(info.limits if info else None)
        self._settings_dialog.set_graphs_available(not on_cpu, info.graphs_reason if info else "")
        self._settings_dialog.set_held_memory(held_memory_text(info) if info else "")
        if section:
            self._settings_dialog.show_section(section)
        self._settings_dialog.open()
        return self._settings_dialog

    def apply_settings(self, settings: AppSettings) -> None:
        """Send valid ``settings`` to the engine (it re-captures or reloads); they become the window's,
        and are saved for the next run, only once the engine has applied them. When it cannot, the
        settings dialog shows the error next to the field that caused it and nothing changes."""
        if not self.session.apply_settings(settings):
            self.store.save_settings(settings)  # the applied ones, chosen again on purpose: kept

    def settings_applied(self, settings: AppSettings) -> None:
        self.store.save_settings(settings)
        self.banners.dismiss(self.fallback_banner)

    def settings_refused(self, settings: AppSettings, failure: Failed | None) -> None:
        dialog = self.open_settings(None)
        dialog.set_settings(settings)  # the person's choices stay in the fields, to be corrected
        if failure is not None:
            dialog.show_error(SettingsError(failure.field or "", failure.message))

    def fell_back_to_defaults(self, saved: AppSettings, failure: Failed | None) -> None:
        field = failure.field if failure and failure.field else None
        section, _, key = (field or "").partition(".")
        value = saved.to_dict().get(section, {}).get(key) if field else None
        named = f"The saved setting {field} ({value})" if field else "The saved settings"
        self.fallback_banner.set_text(
            f"{named} could not be used: {failure.message if failure else 'the model did not load'} "
            "Framewise started on the demo model with the default settings; your saved settings stay as they "
            "were until you apply new ones in Settings."
        )
        self.banners.post(self.fallback_banner)
        self.banners.dismiss(self.error_banner)

    # -- help -------------------------------------------------------------------------------

    def show_log(self) -> LogDialog:
        dialog = LogDialog(self.services.log_file_path(), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def show_about(self) -> AboutDialog:
        try:
            versions = dict(self.services.collect_versions())
        except Exception as error:  # noqa: BLE001 - About must open even if a probe fails
            log.exception("collecting versions failed")
            versions = {"Versions": f"could not be collected ({error})"}
        if self.info is not None:
            versions.setdefault("Model", model_text(self.info))
            versions.setdefault("Vision encoder", encoder_text(self.info))
        dialog = AboutDialog(versions, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    # -- what the session says changed -----------------------------------------------------

    def state_changed(self) -> None:
        answering = self.session.answering
        blocker = self.session.ask_blocker
        self.chat.set_answering(answering)
        self.chat.send_button.setEnabled(blocker is None)
        self.chat.send_button.setToolTip(blocker or "Ask the question (Enter or Ctrl+Return)")
        self._set_question_hint(
            blocker if blocker and not answering else "Ask about the clip…  (Enter sends, Shift+Enter adds a line)"
        )
        self.stop_action.setEnabled(self.session.can_stop)
        self.export_action.setEnabled(self.session.can_export)
        self.new_conversation_action.setEnabled(self.session.can_start_new_conversation)

    def _set_question_hint(self, text: str) -> None:
        edit = self.chat.question_edit
        if edit.placeholderText() == text:
            return
        edit.setPlaceholderText(text)
        # QPlainTextEdit repaints only when its hint appears or disappears, not when the hint's text changes.
        edit.viewport().update()

    def status_changed(self, text: str) -> None:
        self.set_status(text)

    def error_raised(self, text: str, settings_can_help: bool = False) -> None:
        self.show_error(text, settings_can_help=settings_can_help)

    def error_cleared(self) -> None:
        self.banners.dismiss(self.error_banner)

    def progress_changed(self, current: int, total: int) -> None:
        # A single step under way (encoding a clip in one pass) shows as busy, not as a bar stuck at 0 of 1.
        if total > 1 or (total == 1 and current >= 1):
            self.progress_bar.setRange(0, total)
            self.progress_bar.setValue(current)
        else:
            self.progress_bar.setRange(0, 0)
        self.progress_bar.show()

    def progress_ended(self) -> None:
        self.progress_bar.hide()

    def clip_opened(self, path: str) -> None:
        self.store.add_recent_file(str(Path(path).resolve()))

    def clip_changed(self, clip: ClipSampled) -> None:
        self.encoder_panel.clear_answer_stats()
        log.info(
            "clip opened: %s, %dx%d, %.1f s, %d frames sampled",
            clip.clip_name, clip.width, clip.height, clip.duration_s, len(clip.timestamps),
        )

    def conversation_reset(self, conversation: Conversation, notice: str | None) -> None:
        """A new conversation is on screen; the kept ones stay in the list."""
        self.keeper.start(conversation)
        self.chat.clear()
        self.clip_tabs.set_items(self.session.added)
        if notice:
            self.chat.add_notice(notice)

    def turn_started(self, turn: Turn) -> None:
        self.keeper.asked(turn, self.settings)
        self.encoder_panel.clear_answer_stats()
        self.chat.start_turn(turn, "Thinking…")

    def token_received(self, turn: Turn, text: str) -> None:
        self.chat.append_token(text)

    def answer_speed(self, turn: Turn, speed: AnswerSpeed) -> None:
        self.encoder_panel.set_answer_speed(speed)
        self.chat.show_speed(live_speed_text(speed))

    def turn_finished(self, turn: Turn) -> None:
        self._end_turn(turn)

    def encoder_pass(self, chunk: ChunkStats, run_label: str) -> None:
        if chunk.chunk_index == 0:
            self.encoder_panel.start_clip(run_label)
        self.encoder_panel.add_chunk(chunk)

    def metrics_changed(self, metrics: EncoderMetrics) -> None:
        self.encoder_panel.set_metrics(metrics)

    def item_added(self, clip: ClipSampled, done: EncodeDone) -> None:
        self.clip_tabs.set_items(self.session.added)
        self.chat.add_notice(added_notice(done))

    def clip_encoded(self, done: EncodeDone) -> None:
        self.encoder_panel.set_encode_done(done)
        if done.damage:
            self.chat.add_notice(done.damage)

    def answer_stats(self, stats: AnswerStats) -> None:
        self.encoder_panel.set_answer_stats(stats)

    def engine_changed(self, info: EngineInfo) -> None:
        log.info("engine ready: %s on %s, %s", model_text(info), info.device, encoder_text(info))
        # The model's label (the demo model's) is said by its banner and its answers; these say the name only.
        self.engine_label.setText(engine_text(info, info.model_name))
        held = info.held_memory
        held_lines = [f"Holds {held.amount_text()}:", *held.lines()] if held else []
        self.engine_label.setToolTip("\n".join([engine_text(info, model_text(info)), *held_lines]))
        if self._settings_dialog is not None:
            self._settings_dialog.set_held_memory(held_memory_text(info))
        self.encoder_panel.set_engine_info(info)
        title = _encoder_title(info)
        self.encoder_title.setText(title)
        if title == CPU_ENCODER_TITLE:
            self.encoder_title.setToolTip(f"{CPU_ENCODER_TITLE}, so encoding is much slower than on a GPU")
        self.chat_title.setText(info.model_name)
        self.chat_title.setToolTip(model_text(info))
        self.demo_banner.set_text(
            f"Answers come from a small demo model (<b>{html.escape(info.model_label or '')}</b>), bundled so that "
            "Framewise runs anywhere without a download. To ask a real Qwen3-VL, open <b>Settings ▸ Model</b> and "
            "choose a checkpoint folder, or the repo id of one in your Hugging Face cache."
        )
        self.banners.set_raised(self.demo_banner, bool(info.model_label))
        # On a CPU the Encoder panel's title says, once, that there are no CUDA graphs; a banner is kept
        # for a GPU that runs without them, where it is a surprise worth the space.
        if info.graphs_enabled or info.server is not None or info.on_cpu:
            self.banners.dismiss(self.cpu_banner)
        else:
            self.cpu_banner.set_text(f"<b>No CUDA graphs:</b> {html.escape(info.graphs_reason)}.")
            self.cpu_banner.setToolTip(info.graphs_reason)
            self.banners.post(self.cpu_banner)

    # -- small helpers ----------------------------------------------------------------------

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def show_error(self, text: str, *, settings_can_help: bool = False) -> None:
        """Show ``text`` in the error banner (it stays until dismissed or the next success) and the status
        bar; the banner offers Settings only when ``settings_can_help`` (a model that failed to load can be
        changed there, a clip that is not a video cannot be fixed there)."""
        log.warning("%s", text)
        self.error_banner.set_text(text)
        self.error_banner.label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_banner.action_button.setVisible(settings_can_help)
        self.banners.post(self.error_banner)
        self.set_status(text)



def _action(window: QMainWindow, text: str, shortcut, slot) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.triggered.connect(lambda checked=False: slot())
    window.addAction(action)
    return action


def added_notice(done: EncodeDone) -> str:
    """What the conversation says when an item joins it: which clip, picture or span later answers see."""
    if done.span is not None:
        start, end = (format_timestamp(t) for t in done.span)
        return f"Looking closer at {start}–{end} ({done.frames} frames); the answers from here on see this span too."
    what = "picture" if done.kind == "image" else "clip"
    return f"Added the {what} {done.clip_name}; the answers from here on see it too."


def _adds(event: QDropEvent | QDragEnterEvent) -> bool:
    """A drop with Ctrl held adds its file to the conversation instead of opening it."""
    return bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)


def _local_files(mime) -> list[str]:
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []


def _encoder_title(info: EngineInfo) -> str:
    """The Encoder panel's subtitle: on a CPU, the one line that says there are no CUDA graphs."""
    if info.on_cpu and not info.graphs_enabled:
        return CPU_ENCODER_TITLE
    return encoder_text(info)


def _choose_export_file(parent: QWidget, name: str) -> Path | None:
    """Ask where to export, starting in the user's documents folder; the suffix picks the format."""
    path, selected = QFileDialog.getSaveFileName(
        parent, "Export the conversation", str(default_export_folder() / name), "Markdown (*.md);;JSON (*.json)"
    )
    if not path:
        return None
    if not Path(path).suffix:
        path += ".json" if selected.startswith("JSON") else ".md"
    return Path(path)
