"""The live encoder view: per-frame encode latency plot, graph hit counters, chunk table, answer speed.

Everything here updates from the engine's events as they arrive (``ChunkStats`` per encoder
pass, ``EncoderMetrics`` after each encoded item, ``EncodeDone`` per clip, ``AnswerSpeed`` while an
answer streams, ``Done`` per answer), so the view moves while work runs. The numbers (hits per
item, percentiles, ms per frame, tokens per second) are computed in :mod:`framewise.core.metrics`;
this module only lays them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from framewise.core.events import (
    RATE_MIN_TOKENS,
    AnswerSpeed,
    AnswerStats,
    ChunkStats,
    EncodeDone,
    EncoderMetrics,
    EngineInfo,
    ServerInfo,
)
from framewise.core.wording import plural
from framewise.ui.elided_label import ElidedLabel
from framewise.ui.latency_plot import LatencyPlot, describe_chunk
from framewise.ui.wording import encoder_text

if TYPE_CHECKING:
    from framewise.ui.session import Session

_CHUNK_COLUMNS = ("Chunk", "Frames", "Patches", "Budget", "Padding", "ms/frame", "Ran as")


FIGURES_MIN_CHARACTERS = 36
# The longest text each figure writes, in characters, as its format reads for hundreds of items, clips of
# 768 frames and answers of thousands of tokens: what the figures' height is reckoned for, so that they
# do not scroll once the numbers come in.
FIGURE_CHARACTERS = {
    "Encoder": 45, "Graph hits": 40, "Per frame": 50, "Last clip": 30, "Clip timing": 70,
    "First token": 10, "Speed": 40, "GPU memory": 12, "Decoder": 110, "Server": 80,
}
CPU_ENCODER_TITLE = "eager on the CPU: no CUDA graphs"


class EncoderPanel(QWidget):
    """The latency plot, counters for graph hits and answer speed, and the last encode's chunks.

    :attr:`title` is the Encoder section's subtitle: the live figures (time per frame, graph hits,
    first token, speed) and the encoder in a few words, so that a folded panel still shows them.
    Short of height, the panel leaves out its chunk table before its figures scroll. :meth:`follow`
    connects the panel to the session's news."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._graphs_enabled: bool | None = None
        self._on_server = False  # a vLLM server answers: nothing is encoded here
        self._metrics: EncoderMetrics | None = None
        self._run_label = ""
        self.title = ElidedLabel("")
        self._encoder_words = ("", "")  # the title's end, and its tooltip
        self._live: dict[str, str] = dict.fromkeys(("frame", "hits", "first token", "speed"), "")
        self.plot = LatencyPlot()
        self.chunk_table = _chunk_table(round(self.fontMetrics().height() * 1.5))
        self.server_box = ServerCommandBox()
        self.server_box.hide()
        self.figures_scroll = self._build_figures()

        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setHorizontalSpacing(self.fontMetrics().height())
        layout.addWidget(self.plot, 0, 0)
        layout.addWidget(self.figures_scroll, 0, 1)
        layout.addWidget(self.server_box, 1, 0, 1, 2)
        layout.addWidget(self.chunk_table, 2, 0, 1, 2)
        layout.setColumnStretch(0, 3)
        layout.setColumnStretch(1, 2)
        layout.setRowStretch(0, 3)
        layout.setRowStretch(2, 1)  # the chunk table (row 1 holds the server's command, when shown)

    def _build_figures(self) -> QScrollArea:
        """The captioned figures, in a scroll area: they scroll rather than clip when the panel is short."""
        self.encoder_value = QLabel("–")
        self.hits_value = QLabel("–")
        self.hits_value.setToolTip("Counted per item: a clip is a hit when every encoder pass of it replayed a CUDA graph")
        self.latency_value = QLabel("–")
        self.clip_value = QLabel("–")
        self.timing_value = QLabel("–")
        self.first_token_value = QLabel("–")
        self.speed_value = QLabel("–")
        self.memory_value = QLabel("–")
        self.decoder_value = QLabel("–")
        self.server_value = QLabel("–")
        stats = QGridLayout()
        stats.setContentsMargins(0, 0, 0, 0)
        stats.setHorizontalSpacing(self.fontMetrics().height())
        stats.setVerticalSpacing(max(2, self.fontMetrics().height() // 4))
        rows = (
            ("Encoder", self.encoder_value),
            ("Graph hits", self.hits_value),
            ("Per frame", self.latency_value),
            ("Last clip", self.clip_value),
            ("Clip timing", self.timing_value),
            ("First token", self.first_token_value),
            ("Speed", self.speed_value),
            ("GPU memory", self.memory_value),
            ("Decoder", self.decoder_value),
            ("Server", self.server_value),
        )
        self._rows: dict[str, tuple[QLabel, QLabel]] = {}
        for row, (name, value) in enumerate(rows):
            caption = QLabel(name)
            self._rows[name] = (caption, value)
            caption.setForegroundRole(QPalette.ColorRole.PlaceholderText)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setWordWrap(True)
            stats.addWidget(caption, row, 0, Qt.AlignmentFlag.AlignTop)
            stats.addWidget(value, row, 1, Qt.AlignmentFlag.AlignTop)
        stats.setColumnStretch(1, 1)
        stats.setRowStretch(len(rows), 1)
        figures = QWidget()
        figures.setLayout(stats)
        scroll = QScrollArea()
        scroll.setWidget(figures)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Narrower than this, a figure wraps a word or two a line; the plot gives up the width instead.
        scroll.setMinimumWidth(self.fontMetrics().averageCharWidth() * FIGURES_MIN_CHARACTERS)
        return scroll

    def follow(self, session: Session) -> None:
        """Show the session's encoder passes and numbers, and the figures of the answer under way."""
        signals = session.signals
        signals.engine_changed.connect(self.set_engine_info)
        signals.encoder_pass.connect(self._add_pass)
        signals.metrics_changed.connect(self.set_metrics)
        signals.clip_encoded.connect(self.set_encode_done)
        signals.clip_changed.connect(lambda clip: self.clear_answer_stats())
        signals.turn_started.connect(lambda turn: self.clear_answer_stats())
        signals.answer_speed.connect(lambda turn, speed: self.set_answer_speed(speed))
        signals.answer_stats.connect(self.set_answer_stats)

    def _add_pass(self, chunk: ChunkStats, run_label: str) -> None:
        if chunk.chunk_index == 0:
            self.start_clip(run_label)
        self.add_chunk(chunk)

    def set_engine_info(self, info: EngineInfo) -> None:
        self._show_title(info)
        self._graphs_enabled = info.graphs_enabled
        self._on_server = info.server is not None
        self.server_box.setVisible(self._on_server)
        if info.server is not None:
            self._set_row_visible("Server", True)
            self._show_server(info.server)
            return
        self.server_value.setText("– (answers on this machine)")
        # Show the figures that exist where it runs: no graph counters without graphs, no GPU memory on a CPU.
        self._set_row_visible("Graph hits", info.graphs_enabled)
        self._set_row_visible("GPU memory", not info.on_cpu)
        self._set_row_visible("Server", False)
        self._set_row_visible("Decoder", info.decoder is not None)
        for column in (_CHUNK_COLUMNS.index("Budget"), _CHUNK_COLUMNS.index("Padding")):
            self.chunk_table.setColumnHidden(column, not info.graphs_enabled)
        if info.graphs_enabled:
            budgets = info.graph_budgets
            span = f", {len(budgets)} graphs (budgets {budgets[0]}–{budgets[-1]})" if budgets else ""
            self.encoder_value.setText(f"{info.encoder_name}{span} on {info.device}")
        else:
            self.encoder_value.setText(f"eager on {info.device}")
        self.encoder_value.setToolTip(info.graphs_reason)
        if info.decoder is not None:
            decoder = info.decoder
            steps = f"{len(decoder.buckets)} decode graphs" if decoder.graphs_enabled else "eager decode steps"
            self.decoder_value.setText(
                f"{steps}, KV cache of {decoder.context_tokens:,} tokens ({decoder.kv_cache_words()})"
            )
            self.decoder_value.setToolTip(decoder.graphs_reason)
        self._update_hits()

    def _show_title(self, info: EngineInfo) -> None:
        """The encoder in a few words; on a CPU, once, that there are no CUDA graphs."""
        if info.on_cpu and not info.graphs_enabled:
            self._encoder_words = (CPU_ENCODER_TITLE, f"{CPU_ENCODER_TITLE}, so encoding is much slower than on a GPU")
        else:
            self._encoder_words = (encoder_text(info), encoder_text(info))
        self._show_live("hits", "")

    def _show_live(self, figure: str, text: str) -> None:
        """Put ``text`` in the title as the live ``figure`` ("" leaves it out), before the encoder's words."""
        self._live[figure] = text
        words, tooltip = self._encoder_words
        self.title.setText(" · ".join([*filter(None, self._live.values()), words]))
        self.title.setToolTip(" · ".join([*filter(None, self._live.values()), tooltip]))

    def figures_height(self, width: int) -> int:
        """The height the shown figures need not to scroll in a panel ``width`` pixels wide, each at
        the lines its longest text (:data:`FIGURE_CHARACTERS`) wraps to in the figures' column."""
        metrics = self.fontMetrics()
        column = max(self.figures_scroll.minimumWidth(), 2 * (width - self.layout().horizontalSpacing()) // 5)
        characters = max(1, column // metrics.averageCharWidth())
        shown = [name for name, (caption, _) in self._rows.items() if not caption.isHidden()]
        lines = sum(-(-FIGURE_CHARACTERS[name] // characters) for name in shown)
        return lines * metrics.lineSpacing() + max(len(shown) - 1, 0) * self.figures_scroll.widget().layout().verticalSpacing()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        rows = 4 * self.chunk_table.verticalHeader().defaultSectionSize()  # its header and three passes
        self.chunk_table.setVisible(self.height() >= self.figures_height(self.width()) + rows)

    def _show_server(self, server: ServerInfo) -> None:
        """A vLLM server answers: encoding and decoding run there, and nothing of it is measured here."""
        version = f" (vLLM {server.version})" if server.version else ""
        self.encoder_value.setText(f"Encoding runs on the vLLM server at {server.url}{version}, model {server.model}")
        self.encoder_value.setToolTip("Frames are sampled here and sent to the server, whose vision encoder runs them")
        self.decoder_value.setText("on the server")
        self.decoder_value.setToolTip("")
        self.server_value.setText(f"{server.url}: serves {', '.join(server.served_models)}")
        self.hits_value.setText("– (the server's encoder CUDA graphs are not reported over its API)")
        self.server_box.set_command(server.serve_command, server.plain_http_warning, server.pruning_note)

    def start_clip(self, clip_name: str) -> None:
        """A clip started encoding: its chunks get a new run on the plot and a fresh table."""
        self._run_label = clip_name
        self.chunk_table.setRowCount(0)
        self.plot.start_run(clip_name)

    def add_chunk(self, stats: ChunkStats) -> None:
        self.plot.add_chunk(stats)
        row = self.chunk_table.rowCount()
        self.chunk_table.insertRow(row)
        path = "graph" if stats.graph_hit else f"eager: {stats.fallback_reason}" if stats.fallback_reason else "eager"
        cells = (
            str(stats.chunk_index),
            str(stats.frames),
            str(stats.patches),
            "–" if stats.budget is None else str(stats.budget),
            f"{stats.padding_fraction:.0%}",
            f"{stats.ms_per_frame:.2f}",
            path,
        )
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if column < len(cells) - 1:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(describe_chunk(stats, self._run_label))
            self.chunk_table.setItem(row, column, item)
        self.chunk_table.scrollToBottom()

    def set_metrics(self, metrics: EncoderMetrics) -> None:
        """Show the engine's numbers over the run: hits per item and the latency percentiles."""
        self._metrics = metrics
        self.latency_value.setText(latency_summary(metrics))
        p50 = metrics.ms_per_frame_p50
        self._show_live("frame", "" if p50 is None else f"{p50:.1f} ms per frame")
        self._update_hits()

    def set_encode_done(self, done: EncodeDone) -> None:
        self.clip_value.setText(f"{done.frames} frames, {done.patches:,} patches, {done.tokens_text()}")
        self.clip_value.setToolTip(
            "Patches go through the vision encoder; pruning then dropped the tokens that barely changed "
            "from the frame pair before"
            if done.pruned
            else "Patches go through the vision encoder, tokens to the model"
        )
        if self._on_server:
            self.timing_value.setText(
                f"decode {done.decode_ms:.0f} ms, packing for the server {done.preprocess_ms:.0f} ms; "
                "encoded on the server with the first question"
            )
            return
        self.timing_value.setText(
            f"decode {done.decode_ms:.0f} ms, preprocess {done.preprocess_ms:.0f} ms, "
            f"encode {done.encode_ms:.1f} ms ({done.ms_per_frame:.2f} ms/frame)"
        )

    def _set_row_visible(self, name: str, visible: bool) -> None:
        for label in self._rows[name]:
            label.setVisible(visible)

    def clear_answer_stats(self) -> None:
        """A new clip opened or a new question was asked: the last answer's figures belong to the previous one."""
        for value in (self.first_token_value, self.speed_value, self.memory_value):
            value.setText("–")
        self._show_live("first token", "")
        self._show_live("speed", "")

    def set_answer_speed(self, speed: AnswerSpeed) -> None:
        """The speed of the answer being written, until :meth:`set_answer_stats` gives its final figures."""
        self.speed_value.setText(live_speed_text(speed))
        self._show_live("speed", _tokens_per_second(speed.tokens_so_far, speed.tokens_per_second_so_far))

    def set_answer_stats(self, stats: AnswerStats) -> None:
        self.first_token_value.setText(f"{stats.time_to_first_token_ms:.0f} ms" if stats.new_tokens else "– (none written)")
        self.speed_value.setText(stats.speed_text())
        self._show_live("first token", f"first token {stats.time_to_first_token_ms:.0f} ms" if stats.new_tokens else "")
        rated = stats.new_tokens >= RATE_MIN_TOKENS and stats.tokens_per_second > 0
        self._show_live("speed", f"{stats.tokens_per_second:.1f} tokens/s" if rated else "")
        if stats.server is not None:
            self.server_value.setText(f"{stats.server.url}: {stats.server.summary()}")
            self.memory_value.setText("– (on the server)")
        elif stats.gpu_memory_mb is None:
            self.memory_value.setText("– (not on a GPU)")
        else:
            self.memory_value.setText(f"{stats.gpu_memory_mb:,.0f} MiB")
        if stats.decoder is not None:
            self.decoder_value.setText(stats.decoder.summary())

    def _update_hits(self) -> None:
        if self._on_server:
            return
        self.hits_value.setText(hits_summary(self._metrics, self._graphs_enabled))
        metrics = self._metrics
        rate = metrics.hit_rate if metrics is not None and self._graphs_enabled else None
        self._show_live("hits", "" if rate is None else f"{rate:.0%} graph hits")


def _tokens_per_second(tokens: int, rate: float) -> str:
    """The decode speed for the title, once there is one (it is measured after the first token)."""
    return f"{rate:.1f} tokens/s" if tokens >= 2 else ""


def _chunk_table(row_height: int) -> QTableWidget:
    """The table of the last encode's passes, one row each."""
    table = QTableWidget(0, len(_CHUNK_COLUMNS))
    table.setHorizontalHeaderLabels(_CHUNK_COLUMNS)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    table.verticalHeader().setDefaultSectionSize(row_height)
    table.setMinimumHeight(row_height * 2)
    table.setToolTip(
        "Each pass of the vision encoder for the last clip: the token budget it used and the share that was padding"
    )
    return table


def hits_summary(metrics: EncoderMetrics | None, graphs_enabled: bool | None) -> str:
    """Graph hits per item over the run, or the eager passes when the encoder runs no graphs."""
    if graphs_enabled is False:
        return f"none: eager encoder ({plural(metrics.passes if metrics else 0, 'eager pass', 'eager passes')})"
    if metrics is None or not metrics.items:
        return "0 hits, 0 misses"
    rate = metrics.hit_rate or 0.0
    counts = f"{plural(metrics.item_hits, 'hit')}, {plural(metrics.item_misses, 'miss', 'misses')}"
    return f"{counts} ({rate:.0%} of {plural(metrics.items, 'item')})"


def speed_text(tokens: int, tokens_per_second: float, *, so_far: bool = False) -> str:
    """The decode speed and the tokens it covers, e.g. "41.2 tokens/s (96 tokens)"; only the count
    before the second token (the speed is measured after the first). ``so_far`` marks an answer still
    being written."""
    counted = plural(tokens, "token")
    if tokens < 2:
        return f"– ({counted})"
    return f"{tokens_per_second:.1f} tokens/s{' so far' if so_far else ''} ({counted})"


def live_speed_text(speed: AnswerSpeed) -> str:
    """The speed of the answer being written, e.g. "41.2 tokens/s so far (96 tokens)"."""
    return speed_text(speed.tokens_so_far, speed.tokens_per_second_so_far, so_far=True)


def latency_summary(metrics: EncoderMetrics) -> str:
    """The engine's median and 99th percentile of the encode time per frame, and what they cover."""
    if metrics.ms_per_frame_p50 is None or metrics.ms_per_frame_p99 is None:
        return "–"
    span = (
        f"{plural(metrics.window, 'chunk')} this run"
        if metrics.window == metrics.passes
        else f"last {metrics.window} of {metrics.passes} chunks"
    )
    return f"p50 {metrics.ms_per_frame_p50:.2f} ms, p99 {metrics.ms_per_frame_p99:.2f} ms ({span})"


class ServerCommandBox(QWidget):
    """The command line that starts a vLLM server with its encoder CUDA graphs sized like
    Framewise's encoder settings, selectable and with a Copy button."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = QLabel(
            "Encoding runs on the server. To turn on the server's encoder CUDA graphs with the same budgets, "
            "items per batch and frames per batch as Framewise's encoder settings, start vLLM with:"
        )
        self.caption.setWordWrap(True)
        self.command = QPlainTextEdit()
        self.command.setReadOnly(True)
        self.command.setMaximumHeight(self.fontMetrics().height() * 5)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the command line to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.hide()
        row = QHBoxLayout()
        row.addWidget(self.command, 1)
        row.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.warning)
        layout.addWidget(self.caption)
        layout.addLayout(row)

    def set_command(self, command: str, warning: str | None, note: str | None = None) -> None:
        """Show ``command``, with the ``warning`` (plain http to another machine) and the ``note``
        (pruning is the server's) above it where there are any."""
        self.command.setPlainText(command)
        lines = [f"⚠ {text}" for text in (warning, note) if text]
        self.warning.setText("\n".join(lines))
        self.warning.setVisible(bool(lines))

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.command.toPlainText())
