"""Framewise's main window: the clip (preview and sampled frames), the live encoder view, and the chat.

The window never calls the engine: it sends requests to :class:`~framewise.ui.worker.EngineHost` and
redraws from the events that come back (``_on_event``). Which request an event belongs to is
known from ``operation_started``/``operation_finished``, because the worker runs one at a time.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QSplitter,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from framewise.core.conversation_store import (
    ConversationRecorder,
    ConversationStore,
    StoredConversation,
    default_store_path,
)
from framewise.core.errors import ConversationStoreError, ExportError
from framewise.core.events import ChunkStats, ClipSampled, Done, EncodeDone, EngineInfo, Failed, Progress, Token
from framewise.core.errors import SettingsError
from framewise.core.settings import AppSettings
from framewise.ui.banners import Banner
from framewise.ui.chat import ChatPanel
from framewise.core.conversation import Conversation, Turn
from framewise.ui.conversation_list import ConversationList
from framewise.ui.dialogs import AboutDialog, LogDialog, default_export_folder
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.frames import ClipPreview, FrameStrip, format_timestamp
from framewise.ui.metrics import EncoderPanel
from framewise.ui.services import AppServices
from framewise.ui.settings_dialog import SettingsDialog
from framewise.ui.settings_store import SettingsStore
from framewise.ui.worker import EngineHost

log = logging.getLogger(__name__)

DEFAULT_SIZE = (1280, 800)
VIDEO_FILTER = "Video clips (*.mp4 *.mov *.mkv *.webm *.avi *.m4v *.mpg *.mpeg *.wmv *.gif);;All files (*)"
_STAGE_NAMES = {
    "load": "Loading the model",
    "capture": "Capturing CUDA graphs",
    "decode": "Decoding",
    "sample": "Sampling frames",
    "preprocess": "Preprocessing",
    "encode": "Encoding",
}


class MainWindow(QMainWindow):
    """The window. ``host`` runs the engine; ``store`` keeps settings and recent files; ``services``
    gives the About versions and the log path."""

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
        self.settings = settings
        self.info: EngineInfo | None = None
        self.conversation = Conversation()
        self.clip: ClipSampled | None = None
        self._incoming_clip: ClipSampled | None = None
        self._opening_path: str | None = None
        self._operation: str | None = None
        self._settings_dialog: SettingsDialog | None = None
        self._pending_settings: AppSettings | None = None
        self._last_failure: Failed | None = None
        self._shut_down = False
        self._resuming_id: int | None = None  # a kept conversation whose clip is being opened again
        self._stale_clip: str | None = None  # set while a kept conversation's clip is missing
        self.recorder = self._open_recorder(conversation_store)

        self.setWindowTitle("Framewise")
        self.setAcceptDrops(True)
        self._build_widgets()
        self._build_history()
        self._build_menus()
        self._build_status_bar()
        self._restore_geometry()

        host.event.connect(self._on_event)
        host.operation_started.connect(self._on_operation_started)
        host.operation_finished.connect(self._on_operation_finished)
        if store.load_problem:
            self.show_error(store.load_problem)

    @property
    def operation(self) -> str | None:
        """The engine request running now (``"load"``, ``"open_clip"``, ``"ask"``, ...), or ``None`` when idle."""
        return self._operation

    @property
    def settings_dialog(self) -> SettingsDialog | None:
        """The settings dialog once it has been opened."""
        return self._settings_dialog

    @property
    def opening_clip(self) -> bool:
        """True from asking to open a clip until the engine has encoded it (or failed to)."""
        return self._opening_path is not None

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
        for banner in (self.demo_banner, self.cpu_banner, self.error_banner, self.fallback_banner):
            banner.hide()

        self.clip_title = ElidedLabel("No clip")
        self.clip_title.setTextFormat(Qt.TextFormat.PlainText)
        self.preview = ClipPreview()
        self.frame_strip = FrameStrip()
        self.preview.frame_changed.connect(self.frame_strip.select_frame)
        self.frame_strip.frame_selected.connect(self.preview.seek)
        clip_box = _section("Clip", self.clip_title, self.preview, self.frame_strip)

        self.encoder_panel = EncoderPanel()
        self.encoder_title = ElidedLabel("")
        encoder_box = _section("Encoder", self.encoder_title, self.encoder_panel)

        self.chat = ChatPanel()
        self.chat.question_edit.setAcceptDrops(False)
        self.chat.ask_requested.connect(self.ask)
        self.chat.stop_requested.connect(self.stop)
        self.chat_title = ElidedLabel("")
        chat_box = _section("Conversation", self.chat_title, self.chat)

        self.left_splitter = QSplitter(Qt.Orientation.Vertical)
        self.left_splitter.addWidget(clip_box)
        self.left_splitter.addWidget(encoder_box)
        self.left_splitter.setStretchFactor(0, 1)
        self.left_splitter.setStretchFactor(1, 1)
        self.left_splitter.setChildrenCollapsible(False)
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
        for banner in (self.error_banner, self.fallback_banner, self.demo_banner, self.cpu_banner):
            layout.addWidget(banner)
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

    def _build_history(self) -> None:
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
        self.resizeDocks([self.history_dock], [self.fontMetrics().height() * 11], Qt.Orientation.Horizontal)
        self._refresh_history()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.open_action = _action(self, "&Open Clip…", QKeySequence.StandardKey.Open, self.choose_clip)
        file_menu.addAction(self.open_action)
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

    # -- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        """Ask the worker to load the model; progress and banners follow as events arrive."""
        self.set_status("Loading the model…")
        self.host.load()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Save the window's geometry, cancel engine work and stop the worker thread (idempotent)."""
        if self._shut_down:
            return
        self._shut_down = True
        self.store.save_window_geometry(self.saveGeometry())
        self.preview.shutdown()
        self.set_status("Stopping…")
        self.host.shutdown()

    # -- clips ------------------------------------------------------------------------------

    def choose_clip(self) -> None:
        recent = self.store.recent_files()
        start = str(Path(recent[0]).parent) if recent else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open a video clip", start, VIDEO_FILTER)
        if path:
            self.open_clip(path)

    def open_clip(self, path: str) -> None:
        """Decode, sample and encode ``path`` on the worker; the conversation restarts once it is encoded."""
        self._opening_path = path
        self.set_status(f"Opening {Path(path).name}…")
        self.host.open_clip(path)
        self._update_actions()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        files = _local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self._show_drop_highlight(Path(files[0]).name)
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
        self.open_clip(files[0])

    def _show_drop_highlight(self, name: str) -> None:
        """Cover the window with a highlight saying what a drop will open."""
        self.drop_highlight.setText(f"Drop to open {name}")
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

    def _show_clip(self, clip: ClipSampled | None) -> None:
        self.preview.set_clip(clip)
        self.frame_strip.set_clip(clip)
        if clip is None:
            self.clip_title.setText("No clip")
            self.setWindowTitle("Framewise")
            return
        self.clip_title.setText(
            f"{clip.clip_name} · {clip.width}×{clip.height} · {format_timestamp(clip.duration_s)} · "
            f"{len(clip.timestamps)} frames sampled"
        )
        self.clip_title.setToolTip(clip.path)
        self.setWindowTitle(f"{clip.clip_name} — Framewise")

    # -- questions --------------------------------------------------------------------------

    def ask(self, question: str) -> None:
        """Send ``question`` (a follow-up when the conversation has turns) and stream its answer."""
        if self.ask_blocker() is not None:
            return
        info = self.info
        turn = Turn(
            question=question,
            model_name=info.model_name if info else self.settings.model.source,
            model_label=info.model_label if info else None,
        )
        self.conversation.turns.append(turn)
        self._record(lambda recorder: recorder.asked(turn, self.settings))
        self.chat.start_turn(turn, "Thinking…")
        self.chat.set_answering(True)
        self.host.ask(question)
        self._update_actions()

    def stop(self) -> None:
        """Cancel the answer being written or the clip being encoded (``engine.cancel`` is thread-safe)."""
        if self._operation in ("ask", "open_clip") or self.conversation.current is not None:
            self.set_status("Stopping…")
            self.host.cancel()

    def new_conversation(self) -> None:
        if self.conversation.current is not None:
            return
        self._start_conversation(
            Conversation(self.conversation.clip_name, self.conversation.clip_path, timestamps=self.conversation.timestamps)
        )
        self.chat.clear()
        if self.clip is not None:
            self.chat.add_notice(f"Asking about {self.clip.clip_name}")
        self.host.new_conversation()
        self._update_actions()

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
        kept = self._open_kept(conversation_id)
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
        kept = self._open_kept(conversation_id)
        if kept is None:
            return
        self.conversation = kept.conversation
        if self.recorder is not None:
            self.recorder.resume(conversation_id, kept.conversation)
        self.chat.clear()
        for turn in kept.conversation.turns:
            self.chat.start_turn(turn, "")
            self.chat.finish_turn(turn)
        clip_path = kept.conversation.clip_path
        if clip_path and Path(clip_path).is_file():
            self._stale_clip = None
            self.chat.add_notice(
                f"Kept conversation about {kept.conversation.clip_name}; opening the clip again. "
                "The model starts without the earlier answers."
            )
            self._resuming_id = conversation_id
            self.open_clip(clip_path)
        else:
            self._stale_clip = clip_path or "(no clip)"
            self.chat.add_notice(f"The clip of this conversation is no longer at {clip_path}; it can be read and exported, not continued.")
        self.history.select(conversation_id)
        self._update_actions()

    def delete_kept_conversation(self, conversation_id: int) -> None:
        if self.recorder is None:
            return
        if conversation_id == self.recorder.conversation_id:
            if self.conversation.current is not None:
                self.set_status("Wait for the answer to finish before deleting this conversation.")
                return
            self.new_conversation()
        try:
            self.recorder.store.delete(conversation_id)
        except ConversationStoreError as error:
            self.show_error(str(error))
        self._refresh_history()

    def _open_kept(self, conversation_id: int) -> StoredConversation | None:
        if self.recorder is None:
            return None
        try:
            return self.recorder.store.open(conversation_id)
        except ConversationStoreError as error:
            self.show_error(str(error))
            self._refresh_history()
            return None

    def _open_recorder(self, conversation_store: ConversationStore | None) -> ConversationRecorder | None:
        try:
            store = conversation_store or ConversationStore(default_store_path())
        except ConversationStoreError as error:
            log.warning("%s", error)
            self._store_problem = str(error)
            return None
        self._store_problem = None
        recorder = ConversationRecorder(store)
        recorder.start(self.conversation)
        return recorder

    def _start_conversation(self, conversation: Conversation) -> None:
        """Make ``conversation`` the one on screen; the kept ones stay in the list."""
        self.conversation = conversation
        self._stale_clip = None
        if self.recorder is not None:
            self.recorder.start(conversation)
        self._refresh_history()

    def _record(self, write) -> None:
        """Write through the recorder; a failure is shown once and the conversation goes on unkept."""
        if self.recorder is None:
            return
        try:
            write(self.recorder)
        except ConversationStoreError as error:
            self.show_error(f"{error} This conversation is no longer being kept.")
            self.recorder = None
        self._refresh_history()

    def _refresh_history(self) -> None:
        if not hasattr(self, "history"):
            return
        if self.recorder is None:
            self.history.set_conversations([], None)
            self.history.empty_hint.setText(self._store_problem or "Conversations are not being kept")
            return
        try:
            summaries = self.recorder.store.list()
        except ConversationStoreError as error:
            summaries = []
            self.history.empty_hint.setText(str(error))
        self.history.set_conversations(summaries, self.recorder.conversation_id)

    def _end_turn(self, turn: Turn) -> None:
        """A turn ended (done, stopped or failed): show it, keep it, and log its size and timing."""
        self.chat.finish_turn(turn)
        self._record(lambda recorder: recorder.finished(turn))
        stats = turn.stats
        if stats is not None:
            log.info(
                "answer %s: %d tokens, first token %.0f ms, %.1f tokens/s, %d frames",
                turn.status, stats.new_tokens, stats.time_to_first_token_ms, stats.tokens_per_second, stats.frames,
            )
        else:
            log.info("answer %s: %d characters", turn.status, len(turn.answer))

    # -- settings ---------------------------------------------------------------------------

    def open_settings(self, section: str | None) -> SettingsDialog:
        """Show the settings dialog (on ``section``'s tab when given) filled with the applied settings."""
        if self._settings_dialog is None:
            self._settings_dialog = SettingsDialog(self.settings, self, api_key_note=self.store.api_key_note())
            self._settings_dialog.settings_applied.connect(self.apply_settings)
        else:
            self._settings_dialog.set_settings(self.settings)
        info = self.info
        on_cpu = info is not None and info.server is None and info.device.startswith("cpu")
        self._settings_dialog.set_graphs_available(not on_cpu, info.graphs_reason if info else "")
        if section:
            self._settings_dialog.show_section(section)
        self._settings_dialog.open()
        return self._settings_dialog

    def apply_settings(self, settings: AppSettings) -> None:
        """Send valid ``settings`` to the engine (it re-captures or reloads); they become the window's,
        and are saved for the next run, only once the engine has applied them. When it cannot, the
        settings dialog shows the error next to the field that caused it and nothing changes."""
        if settings == self.settings:
            self.store.save_settings(settings)
            return
        self._pending_settings = settings
        self.set_status("Applying the settings…")
        self.host.apply_settings(settings)

    def _finish_applying(self, ok: bool) -> None:
        pending, self._pending_settings = self._pending_settings, None
        if pending is None:  # the fallback to the defaults at start: nothing to save
            return
        if ok:
            self.settings = pending
            self.store.save_settings(pending)
            self.fallback_banner.hide()
            return
        failure = self._last_failure
        dialog = self.open_settings(None)
        dialog.set_settings(pending)  # the person's choices stay in the fields, to be corrected
        if failure is not None:
            dialog.show_error(SettingsError(failure.field or "", failure.message))

    def _fall_back_to_defaults(self) -> None:
        """The saved settings did not load at start: run on the defaults (the demo model) without
        saving them, and say which setting failed."""
        failure = self._last_failure
        field = failure.field if failure and failure.field else None
        section, _, key = (field or "").partition(".")
        value = self.settings.to_dict().get(section, {}).get(key) if field else None
        named = f"The saved setting {field} ({value})" if field else "The saved settings"
        self.fallback_banner.set_text(
            f"{named} could not be used: {failure.message if failure else 'the model did not load'} "
            "Framewise started on the demo model with the default settings; your saved settings stay as they "
            "were until you apply new ones in Settings."
        )
        self.fallback_banner.show()
        self.error_banner.hide()
        self.settings = AppSettings()
        self.host.apply_settings(self.settings)

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
            versions.setdefault("Model", _model_text(self.info))
            versions.setdefault("Vision encoder", _encoder_text(self.info))
        dialog = AboutDialog(versions, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    # -- events from the worker -------------------------------------------------------------

    def _on_operation_started(self, name: str) -> None:
        self._operation = name
        self._update_actions()

    def _on_operation_finished(self, name: str, ok: bool) -> None:
        self._operation = None
        self.progress_bar.hide()
        if name == "open_clip":
            self._finish_clip(ok, self._opening_path)
            self._opening_path = None
        elif self._incoming_clip is not None:  # new sampling or model settings made the engine re-open the clip
            self._finish_clip(ok, None)
        if name == "ask":
            turn = self.conversation.current
            if turn is not None:  # dropped before it started (Stop pressed while it waited)
                turn.status = "stopped"
                self._end_turn(turn)
            self.chat.set_answering(False)
        elif name in ("load", "apply_settings") and ok:
            self.set_status(f"Ready: {_model_text(self.info)}" if self.info else "Ready")
        if name == "apply_settings":
            self._finish_applying(ok)
        elif name == "load" and not ok and self.settings != AppSettings():
            self._fall_back_to_defaults()
        self._update_actions()

    def _on_event(self, event: object) -> None:
        if isinstance(event, Token):
            self._on_token(event)
        elif isinstance(event, Progress):
            self._on_progress(event)
        elif isinstance(event, ChunkStats):
            if event.chunk_index == 0:
                self.encoder_panel.start_clip(self._encode_label())
            self.encoder_panel.add_chunk(event)
        elif isinstance(event, ClipSampled):
            self._incoming_clip = event
            self._show_clip(event)
        elif isinstance(event, EncodeDone):
            self.encoder_panel.set_encode_done(event)
            self.set_status(
                f"{event.clip_name}: {event.frames} frames encoded in {event.encode_ms:.0f} ms "
                f"({event.ms_per_frame:.2f} ms per frame). Ask away."
            )
        elif isinstance(event, Done):
            self._on_done(event)
        elif isinstance(event, Failed):
            self._on_failed(event)
        elif isinstance(event, EngineInfo):
            self._on_engine_info(event)

    def _on_token(self, token: Token) -> None:
        turn = self.conversation.current
        if turn is None:
            return
        turn.status = "streaming"
        turn.answer += token.text
        self.chat.append_token(token.text)

    def _on_done(self, done: Done) -> None:
        self.encoder_panel.set_answer_stats(done.stats)
        turn = self.conversation.current
        if turn is None:
            return
        turn.answer = done.text
        turn.stats = done.stats
        turn.status = "stopped" if done.stats.cancelled else "done"
        self._end_turn(turn)
        self.set_status("Stopped." if done.stats.cancelled else "Answered.")

    def _on_failed(self, failed: Failed) -> None:
        self._last_failure = failed
        cancelled = failed.kind == "CancelledError"
        if self._operation == "ask" and self.conversation.current is not None:
            turn = self.conversation.current
            turn.status = "stopped" if cancelled else "failed"
            turn.error = None if cancelled else failed.message
            self._end_turn(turn)
            self.set_status("Stopped." if cancelled else f"The question failed: {failed.message}")
            return
        if cancelled:
            self.set_status("Cancelled.")
            return
        what = {
            "open_clip": f"Could not open {Path(self._opening_path or '').name}",
            "load": "Could not load the model",
            "apply_settings": "Could not apply the settings",
        }.get(self._operation or "", "Something went wrong")
        self.show_error(f"{what}: {failed.message}")

    def _on_progress(self, progress: Progress) -> None:
        stage = _STAGE_NAMES.get(progress.stage, progress.stage.capitalize())
        if progress.total > 0:
            self.progress_bar.setRange(0, progress.total)
            self.progress_bar.setValue(progress.current)
            count = f" ({progress.current}/{progress.total})"
        else:
            self.progress_bar.setRange(0, 0)
            count = ""
        self.progress_bar.show()
        self.set_status(f"{stage}{count}: {progress.message}" if progress.message else f"{stage}{count}…")

    def _on_engine_info(self, info: EngineInfo) -> None:
        log.info("engine ready: %s on %s, %s", _model_text(info), info.device, _encoder_text(info))
        self.info = info
        self.engine_label.setText(f"{_model_text(info)} · {info.device} · {_encoder_text(info)}")
        self.encoder_panel.set_engine_info(info)
        self.encoder_title.setText(_encoder_title(info))
        self.chat_title.setText(_model_text(info))
        self.demo_banner.set_text(
            f"Answers come from a small demo model (<b>{html.escape(info.model_label or '')}</b>), bundled so that "
            "Framewise runs anywhere without a download. To ask a real Qwen3-VL, open <b>Settings ▸ Model</b> and "
            "choose a checkpoint folder, or the repo id of one in your Hugging Face cache."
        )
        self.demo_banner.setVisible(bool(info.model_label))
        # On a CPU the Encoder panel's title says, once, that there are no CUDA graphs; a banner is kept
        # for a GPU that runs without them, where it is a surprise worth the space.
        if info.graphs_enabled or info.server is not None or info.device.startswith("cpu"):
            self.cpu_banner.hide()
        else:
            self.cpu_banner.set_text(f"<b>No CUDA graphs:</b> {html.escape(info.graphs_reason)}.")
            self.cpu_banner.setToolTip(info.graphs_reason)
            self.cpu_banner.show()
        if self.error_banner.isVisible() and self._operation in ("load", "apply_settings"):
            self.error_banner.hide()

    def _finish_clip(self, ok: bool, opened_path: str | None) -> None:
        """A request that sampled a clip ended: keep the new clip and start its conversation, or restore the old one.

        ``opened_path`` is the path a person opened (``None`` when new settings re-opened the clip).
        """
        incoming, self._incoming_clip = self._incoming_clip, None
        resuming, self._resuming_id = self._resuming_id, None
        if not ok:
            self._show_clip(self.clip)  # the engine keeps the previous clip; so does the window
            if resuming is not None:  # the kept conversation stays readable, but cannot go on
                self._stale_clip = self.conversation.clip_path
            return
        if opened_path:
            self.error_banner.hide()
            self.store.add_recent_file(str(Path(opened_path).resolve()))
        if incoming is None:
            return
        self.clip = incoming
        self.encoder_panel.clear_answer_stats()
        log.info(
            "clip opened: %s, %dx%d, %.1f s, %d frames sampled",
            incoming.clip_name, incoming.width, incoming.height, incoming.duration_s, len(incoming.timestamps),
        )
        if resuming is not None:
            self._update_actions()
            return
        self.chat.clear()
        self._start_conversation(Conversation(incoming.clip_name, incoming.path, timestamps=incoming.timestamps))
        if opened_path:
            self.chat.add_notice(f"Asking about {incoming.clip_name}")
        else:
            self.chat.add_notice(f"The new settings re-sampled {incoming.clip_name}; the conversation starts afresh")

    def _encode_label(self) -> str:
        if self._incoming_clip is not None:
            return self._incoming_clip.clip_name
        if self._opening_path is not None:
            return Path(self._opening_path).name
        return f"question {len(self.conversation.turns)}"

    # -- small helpers ----------------------------------------------------------------------

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def show_error(self, text: str) -> None:
        """Show ``text`` in the error banner (it stays until dismissed or the next success) and the status bar."""
        log.warning("%s", text)
        self.error_banner.set_text(text)
        self.error_banner.label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_banner.show()
        self.set_status(text)

    def ask_blocker(self) -> str | None:
        """Why a question cannot be asked now, or ``None`` when it can."""
        if self.clip is None:
            return "Open a clip first: drop one on the window or use File ▸ Open (Ctrl+O)"
        if self._stale_clip is not None:
            return f"This conversation's clip is no longer at {self._stale_clip}; open a clip to ask about it"
        if self._operation in ("load", "apply_settings", "open_clip") or self._opening_path is not None:
            return "Wait for the clip to finish encoding"
        if self.conversation.current is not None:
            return "Wait for the answer, or press Stop (Esc)"
        return None

    def _update_actions(self) -> None:
        answering = self.conversation.current is not None
        blocker = self.ask_blocker()
        self.chat.send_button.setEnabled(blocker is None)
        self.chat.send_button.setToolTip(blocker or "Ask the question (Enter or Ctrl+Return)")
        self.chat.question_edit.setPlaceholderText(
            blocker if blocker and not answering else "Ask about the clip…  (Enter sends, Shift+Enter adds a line)"
        )
        self.stop_action.setEnabled(answering or self._operation == "open_clip")
        self.export_action.setEnabled(bool(self.conversation.turns))
        self.new_conversation_action.setEnabled(not answering)


def _section(title: str, subtitle: QLabel, *widgets: QWidget) -> QWidget:
    """A titled area: bold title, a dimmer subtitle on the same line, then the widgets."""
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    header = QHBoxLayout()
    heading = QLabel(title)
    font = heading.font()
    font.setBold(True)
    font.setPointSizeF(font.pointSizeF() * 1.1)
    heading.setFont(font)
    subtitle.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    subtitle.setWordWrap(False)
    header.addWidget(heading)
    header.addSpacing(heading.fontMetrics().height() // 2)
    header.addWidget(subtitle, 1)
    layout.addLayout(header)
    for widget in widgets:
        layout.addWidget(widget, 1 if not isinstance(widget, FrameStrip) else 0)
    return box


def _action(window: QMainWindow, text: str, shortcut, slot) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.triggered.connect(lambda checked=False: slot())
    window.addAction(action)
    return action


def _local_files(mime) -> list[str]:
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []


def _model_text(info: EngineInfo) -> str:
    return f"{info.model_name} ({info.model_label})" if info.model_label else info.model_name


def _encoder_text(info: EngineInfo) -> str:
    if info.server is not None:
        return "encoder on the vLLM server"
    return info.encoder_name if info.graphs_enabled else "eager (no CUDA graphs)"


def _encoder_title(info: EngineInfo) -> str:
    """The Encoder panel's subtitle: on a CPU, the one line that says there are no CUDA graphs."""
    if info.server is None and not info.graphs_enabled and info.device.startswith("cpu"):
        return "eager on the CPU: no CUDA graphs, so encoding is much slower than on a GPU"
    return _encoder_text(info)


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
