"""Framewise's main window: the clip (preview and sampled frames), the live encoder view, and the chat.

The window holds the layout, the menus and the wiring, and keeps no state of its own: its
:class:`~framewise.ui.session.Session` sends requests to :class:`~framewise.ui.worker.EngineHost`
and follows the events that come back, and each part of the window follows the session's signals
for what it shows (the status bar, the banners, the Clip, Encoder and Conversation sections, the
Past conversations dock). How clips arrive (menus, drops) is :mod:`~framewise.ui.clip_files`; the
settings dialog's round trip is :mod:`~framewise.ui.settings_flow`.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import QMainWindow, QSplitter, QStyle, QVBoxLayout, QWidget

from framewise.core.conversation import Turn
from framewise.core.conversation_store import ConversationStore
from framewise.core.settings import AppSettings
from framewise.ui.banners import WindowBanners
from framewise.ui.chat import ChatPanel
from framewise.ui.clip_column import ClipColumn
from framewise.ui.clip_files import ClipFiles
from framewise.ui.clip_section import ClipSection
from framewise.ui.dialogs import AboutDialog, LogDialog
from framewise.ui.export import Exporter
from framewise.ui.metrics import EncoderPanel
from framewise.ui.past_conversations import PastConversations
from framewise.ui.queries import QueryThread
from framewise.ui.section import Section
from framewise.ui.services import AppServices
from framewise.ui.session import Session
from framewise.ui.settings_flow import SettingsFlow
from framewise.ui.settings_store import SettingsStore
from framewise.ui.status_bar import StatusBar
from framewise.ui.wording import encoder_text, model_text
from framewise.ui.worker import EngineHost

log = logging.getLogger(__name__)

DEFAULT_SIZE = (1280, 800)
# Below this width the Past conversations list starts hidden: at 1024×640 the clip and the conversation
# come first (the left column folds the Encoder panel on its own where the clip leaves it too little).
ROOMY_WIDTH = 1280


class MainWindow(QMainWindow):
    """The window. ``host`` runs the engine; ``store`` keeps settings and recent files; ``services``
    gives the About versions, the log path and the memory estimate. Its state is :attr:`session`'s."""

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
        self._shut_down = False
        self.session = Session(host, settings)
        self.queries = QueryThread(self)

        self.setWindowTitle("Framewise")
        self._build_parts(conversation_store)
        self._build_layout()
        self._build_menus()
        self._follow_session()
        self._restore_geometry()

        host.event.connect(self.session.handle)
        if store.load_problem:
            self.banners.show_settings_problem(store.load_problem)
            self.status_bar.say(store.load_problem)

    # -- layout -----------------------------------------------------------------------------

    def _build_parts(self, conversation_store: ConversationStore | None) -> None:
        """The window's parts, each following the session on its own."""
        self.status_bar = StatusBar(self)
        self.setStatusBar(self.status_bar)
        self.settings_flow = SettingsFlow(
            self, self.session, self.store, self.services.memory_estimate, self.queries.run
        )
        self.banners = WindowBanners(self.settings_flow.open)
        self.clip_section = ClipSection()
        self.encoder_panel = EncoderPanel()
        self.encoder_section = Section("Encoder", self.encoder_panel.title, self.encoder_panel, collapsible=True)
        self.chat = ChatPanel()
        self.chat.question_edit.setAcceptDrops(False)
        self.exporter = Exporter(self, self.status_bar.say, self.show_error)
        self.history_dock = PastConversations(
            self.session, self.chat, self.exporter, self.status_bar.say, self.show_error, conversation_store, self
        )
        if self.history_dock.keeper.notice:
            self.banners.show_store_notice(self.history_dock.keeper.notice)
        self.clip_files = ClipFiles(self, self.session, self.store)

    def _build_layout(self) -> None:
        line = self.fontMetrics().height()
        chat_box = Section("Conversation", self.chat.title, self.chat)
        self.left_splitter = ClipColumn(self.clip_section, self.encoder_section, self.encoder_panel)
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
        self.clip_files.highlight.raise_()
        self.main_splitter.setSizes([11 * DEFAULT_SIZE[0] // 20, 9 * DEFAULT_SIZE[0] // 20])
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.history_dock)

    def _build_menus(self) -> None:
        session, files = self.session, self.clip_files
        file_menu = self.menuBar().addMenu("&File")
        self.open_action = _action(self, "&Open Clip…", QKeySequence.StandardKey.Open, files.choose_clip)
        file_menu.addAction(self.open_action)
        self.add_action = _action(self, "&Add to Conversation…", "Ctrl+Shift+O", files.choose_added_clip)
        self.add_action.setStatusTip("Add a clip or a picture beside the open one; the conversation goes on about both")
        file_menu.addAction(self.add_action)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(lambda: files.fill_recent_menu(self.recent_menu))
        file_menu.addSeparator()
        self.export_action = _action(
            self, "&Export Conversation…", "Ctrl+Shift+E",
            lambda: self.exporter.choose_and_export(session.conversation, session.settings),
        )
        file_menu.addAction(self.export_action)
        file_menu.addSeparator()
        file_menu.addAction(_action(self, "&Quit", "Ctrl+Q", self.close))

        edit_menu = self.menuBar().addMenu("&Edit")
        self.copy_answer_action = _action(self, "&Copy Last Answer", "Ctrl+Shift+C", self.copy_last_answer)
        edit_menu.addAction(self.copy_answer_action)
        edit_menu.addSeparator()
        self.settings_action = _action(self, "&Settings…", "Ctrl+,", lambda: self.settings_flow.open(None))
        self.settings_action.setMenuRole(QAction.MenuRole.PreferencesRole)
        edit_menu.addAction(self.settings_action)

        chat_menu = self.menuBar().addMenu("&Conversation")
        self.ask_action = _action(self, "&Ask", "Ctrl+Return", self.chat.submit)
        self.stop_action = _action(self, "S&top", "Esc", session.stop)
        self.new_conversation_action = _action(self, "&New Conversation", QKeySequence.StandardKey.New, session.new_conversation)
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

    def _follow_session(self) -> None:
        """Connect the parts to the session and to each other."""
        session, chat, clip = self.session, self.chat, self.clip_section
        for part in (self.status_bar, self.banners, clip, self.encoder_panel, chat):
            part.follow(session)
        session.signals.state_changed.connect(self._update_actions)
        session.signals.engine_changed.connect(lambda info: self.left_splitter.arrange())  # its figures' rows changed
        clip.clip_shown.connect(lambda shown: self.setWindowTitle(f"{shown.clip_name} — Framewise" if shown else "Framewise"))
        _log_session(session)
        chat.ask_requested.connect(session.ask)
        chat.stop_requested.connect(session.stop)
        chat.time_clicked.connect(clip.show_moment)
        chat.item_time_clicked.connect(clip.show_item_moment)
        chat.question_times_changed.connect(clip.show_question_times)
        clip.message.connect(self.status_bar.say)
        clip.note.connect(self.status_bar.note)
        session.signals.clip_opened.connect(lambda path: chat.question_edit.setFocus())  # the next thing to do is ask
        self.clip_files.message.connect(self.status_bar.say)

    def _update_actions(self) -> None:
        self.stop_action.setEnabled(self.session.can_stop)
        self.export_action.setEnabled(self.session.can_export)
        self.new_conversation_action.setEnabled(self.session.can_start_new_conversation)

    def _restore_geometry(self) -> None:
        """The geometry the window was closed with; at a first start, the whole screen."""
        geometry = self.store.window_geometry()
        first_start = geometry is None or not self.restoreGeometry(geometry)
        if first_start:
            self.resize(*DEFAULT_SIZE)
        self._fit_to_screen(maximize=first_start)
        self._arrange_for_size()

    def _arrange_for_size(self) -> None:
        """Decide what the window shows first at its opening size: on a narrow screen the clip and the
        conversation; the list is a click away."""
        if self.width() < ROOMY_WIDTH:
            self.history_dock.hide()
        # The list is as wide as a clip's name and its first question read comfortably, and no wider.
        line = self.fontMetrics().height()
        width = min(max(line * 11, self.width() // 6), line * 20)
        self.resizeDocks([self.history_dock], [width], Qt.Orientation.Horizontal)

    def _fit_to_screen(self, maximize: bool) -> None:
        """Open maximized when asked (a first start) or where the window, with its title bar and frame,
        would not fit its screen's free area (a small screen, or geometry saved on a larger one): the
        window manager then fits the frame too."""
        screen = self.screen()
        if screen is None:
            return
        available = screen.availableGeometry()
        frame = self._frame_allowance()
        if maximize or self.width() + frame.width() > available.width() or self.height() + frame.height() > available.height():
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
        """Save the window's geometry, cancel engine work and stop the worker threads (idempotent)."""
        if self._shut_down:
            return
        self._shut_down = True
        self.store.save_window_geometry(self.saveGeometry())
        self.clip_section.tabs.shutdown()
        self.status_bar.say("Stopping…")
        self.queries.shutdown()
        self.host.shutdown()

    # -- small actions ----------------------------------------------------------------------

    def copy_last_answer(self) -> None:
        cards = self.chat.answer_cards()
        if cards:
            cards[-1].copy_text()

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
        info = self.session.info
        if info is not None:
            versions.setdefault("Model", model_text(info))
            versions.setdefault("Vision encoder", encoder_text(info))
        dialog = AboutDialog(versions, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def show_error(self, text: str, *, settings_can_help: bool = False) -> None:
        """Show ``text`` in the error banner (it stays until dismissed or the next success) and the
        status bar; the banner offers Settings only when ``settings_can_help``."""
        self.banners.show_error(text, settings_can_help)
        self.status_bar.say(text)


def _action(window: QMainWindow, text: str, shortcut, slot) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.triggered.connect(lambda checked=False: slot())
    window.addAction(action)
    return action


def _log_session(session: Session) -> None:
    """Log the engine each time it changes, each clip opened and each answer's size and timing
    (never the question: it may be private)."""
    signals = session.signals
    signals.engine_changed.connect(
        lambda info: log.info("engine ready: %s on %s, %s", model_text(info), info.device, encoder_text(info))
    )
    signals.clip_changed.connect(
        lambda clip: log.info(
            "clip opened: %s, %dx%d, %.1f s, %d frames sampled",
            clip.clip_name, clip.width, clip.height, clip.duration_s, len(clip.timestamps),
        )
    )
    signals.turn_finished.connect(lambda turn: _log_turn(turn, len(session.clip.timestamps) if session.clip else 0))


def _log_turn(turn: Turn, frames: int) -> None:
    stats = turn.stats
    if stats is None:
        log.info("answer %s: %d characters", turn.status, len(turn.answer))
        return
    log.info(
        "answer %s: %d tokens, first token %.0f ms, %.1f tokens/s, %d frames",
        turn.status, stats.new_tokens, stats.time_to_first_token_ms, stats.tokens_per_second, frames,
    )
