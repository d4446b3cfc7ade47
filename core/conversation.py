"""A conversation about one clip, and its export as Markdown or JSON.

Plain data: the window records questions and answers here, :mod:`framewise.core.conversation_store`
keeps them on disk, and the exports are built from it, so they carry the clip's name, the sampled
timestamps, the settings used, each answer's model label and the times it mentions, in seconds.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from framewise.core.errors import ExportError
from framewise.core.events import AnswerStats
from framewise.core.markdown_text import code_span, escape_text, safe_answer
from framewise.core.settings import AppSettings
from framewise.core.timecodes import TimeMention, find_times
from framewise.core.wording import plural

TurnStatus = Literal["waiting", "streaming", "done", "stopped", "failed", "interrupted"]
"""``interrupted``: Framewise ended (closed, crashed or killed) while the answer was being written."""
EXPORT_FORMAT = "framewise-conversation/1"
INTERRUPTED_TEXT = "Framewise closed before this answer was finished"


@dataclass
class Turn:
    """One question and its answer (possibly still streaming, stopped or failed).

    ``saw`` names the items the answer saw when there were several (clips, pictures, closer looks
    at a span), in order; empty for the one clip of the conversation. ``time_clips`` then gives, for
    each time the answer mentions (:func:`~framewise.core.timecodes.find_times`, in order), the name
    of the item it belongs to, or ``None`` where the answer does not say
    (:func:`~framewise.core.clip_times.time_clip_names`).
    """

    question: str
    model_name: str
    model_label: str | None
    asked_at: str = field(default_factory=lambda: _now())
    answer: str = ""
    status: TurnStatus = "waiting"
    error: str | None = None
    stats: AnswerStats | None = None
    saw: tuple[str, ...] = ()
    time_clips: tuple[str | None, ...] = ()

    def times(self) -> list[tuple[TimeMention, str | None]]:
        """Each time the answer mentions with the name of the item it belongs to (``None``: not known)."""
        times = find_times(self.answer)
        clips = self.time_clips if len(self.time_clips) == len(times) else (None,) * len(times)
        return list(zip(times, clips))

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "status": self.status,
            "error": self.error,
            "model": self.model_name,
            "model_label": self.model_label,
            "asked_at": self.asked_at,
            "stats": dataclasses.asdict(self.stats) if self.stats else None,
            "times": [self._time_json(time, clip) for time, clip in self.times()],
            "saw": list(self.saw),
        }

    def _time_json(self, time: TimeMention, clip: str | None) -> dict[str, Any]:
        """A time's text and seconds and, when the answer saw several items, ``clip``: the one it
        belongs to (``None`` where the answer does not say)."""
        return {**time.to_json(), "clip": clip} if self.saw else time.to_json()


@dataclass
class Conversation:
    """The questions asked about one clip, in order."""

    clip_name: str | None = None
    clip_path: str | None = None
    turns: list[Turn] = field(default_factory=list)
    timestamps: tuple[float, ...] = ()
    """Seconds from the clip's start of the frames the model saw."""

    @property
    def current(self) -> Turn | None:
        """The last turn while it is still waiting or streaming."""
        if self.turns and self.turns[-1].status in ("waiting", "streaming"):
            return self.turns[-1]
        return None

    def to_json(self, settings: AppSettings) -> dict[str, Any]:
        """The conversation, the clip and the settings as one JSON-able dict."""
        return {
            "format": EXPORT_FORMAT,
            "exported_at": _now(),
            "clip": {"name": self.clip_name, "path": self.clip_path, "timestamps": list(self.timestamps)},
            "settings": settings.to_dict(),
            "turns": [turn.to_json() for turn in self.turns],
        }

    def to_markdown(self, settings: AppSettings) -> str:
        """A readable transcript: clip, models, each question and answer with its stats, then the
        settings. What people and files wrote shows as written, answers keep their safe Markdown
        (:mod:`~framewise.core.markdown_text`)."""
        lines = [f"# Framewise conversation — {code_span(self.clip_name) if self.clip_name else 'no clip'}", ""]
        if self.clip_name:
            path = f" ({code_span(self.clip_path)})" if self.clip_path else ""
            lines.append(f"- Clip: {code_span(self.clip_name)}{path}")
            if self.timestamps:
                seconds = ", ".join(f"{timestamp:.2f}" for timestamp in self.timestamps)
                lines.append(f"- {plural(len(self.timestamps), 'frame')} sampled at (s): {seconds}")
        else:
            lines.append("- Clip: none")
        for model in _models_used(self.turns):
            lines.append(f"- Model: {escape_text(model)}")
        lines.append(f"- Exported: {_now()}")
        for number, turn in enumerate(self.turns, start=1):
            lines += ["", f"## Question {number}", "", escape_text(turn.question), ""]
            lines += _answer_lines(turn)
        lines += ["", "## Settings", "", "```json", json.dumps(settings.to_dict(), indent=2, sort_keys=True), "```", ""]
        return "\n".join(lines)

    def export_text(self, settings: AppSettings, suffix: str) -> str:
        """The export for a file ending in ``suffix``: JSON for ``.json``, Markdown otherwise."""
        if suffix.lower() == ".json":
            return json.dumps(self.to_json(settings), indent=2, ensure_ascii=False)
        return self.to_markdown(settings)

    def export(self, path: Path, settings: AppSettings) -> None:
        """Write the conversation to ``path`` (format from its suffix); :class:`ExportError` when it cannot."""
        try:
            path.write_text(self.export_text(settings, path.suffix) + "\n", encoding="utf-8")
        except OSError as error:
            raise ExportError(f"Could not write {path}: {error.strerror or error}. Choose another folder.") from error


def _answer_lines(turn: Turn) -> list[str]:
    """A turn's answer in the Markdown export: who answered, the answer, its times, how it ended, its stats."""
    lines = [f"**Answer** — {escape_text(_model_text(turn.model_name, turn.model_label))}", ""]
    if turn.answer:
        lines += [safe_answer(turn.answer), ""]
        times = turn.times()
        if times:
            lines += [f"_Times: {'; '.join(_time_in_seconds(time, clip) for time, clip in times)}_", ""]
    if turn.status == "failed":
        lines += ["\n".join(f"> {line}" for line in escape_text(f"Error: {turn.error}").splitlines()), ""]
    elif turn.status == "stopped":
        lines += ["_(stopped)_", ""]
    elif turn.status == "interrupted":
        lines += [f"_({INTERRUPTED_TEXT})_", ""]
    if turn.stats:
        lines += [f"_{escape_text(format_answer_stats(turn.stats))}_", ""]
    return lines


def format_answer_stats(stats: AnswerStats) -> str:
    """One line: tokens and speed (:meth:`AnswerStats.speed_text`), time to first token (for an answer
    stopped before it, how long it ran), GPU memory when known, and the server's figures for an
    answer from a vLLM server."""
    if stats.new_tokens:
        parts = [stats.speed_text(), f"first token {stats.time_to_first_token_ms:.0f} ms"]
    else:
        parts = [f"no token in {stats.time_to_first_token_ms:.0f} ms"]
    if stats.gpu_memory_mb is not None:
        parts.append(f"GPU memory {stats.gpu_memory_mb:.0f} MiB")
    if stats.server is not None:
        parts.append(f"vLLM server {stats.server.url}: {stats.server.summary()}")
    return " · ".join(parts)


def _time_in_seconds(time: TimeMention, clip: str | None = None) -> str:
    """A time as the answer wrote it (as code: Qwen3-VL's `<t seconds>` markers are not HTML), in
    seconds, and the item it belongs to when known."""
    seconds = f"{time.start_s:g}" if time.end_s is None else f"{time.start_s:g}–{time.end_s:g}"
    return f"{code_span(time.text)} = {seconds} s" + (f" in {code_span(clip)}" if clip else "")


def _model_text(model_name: str, model_label: str | None) -> str:
    return f"{model_name} ({model_label})" if model_label else model_name


def _models_used(turns: list[Turn]) -> list[str]:
    seen: dict[str, None] = {}
    for turn in turns:
        seen.setdefault(_model_text(turn.model_name, turn.model_label))
    return list(seen)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
