"""Qwen3-VL's chat layout: where the visual content and the earlier turns go among the messages
given to a chat template. Without torch, so that the vLLM backend lays out its requests with it;
:mod:`~framewise.core.families.qwen3_vl.prompt` renders and tokenizes the same layout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def time_marker(seconds: float) -> str:
    """The text the prompt puts before a clip's frame pair at ``seconds`` (the mean of its two frames' times)."""
    return f"<{seconds:.1f} seconds>"


def chat_messages(
    question: str, *, videos: int = 0, images: int = 0, history: Sequence[tuple[str, str]] = ()
) -> list[dict[str, Any]]:
    """Chat messages in the transformers format: the visual content (``videos`` clips first, then
    ``images`` images) opens the first user turn, earlier (question, answer) turns follow in order,
    and ``question`` is the last user turn."""
    visuals: list[dict[str, Any]] = [{"type": "video"} for _ in range(videos)]
    visuals += [{"type": "image"} for _ in range(images)]
    turns = [*history, (question, None)]
    messages: list[dict[str, Any]] = []
    for index, (asked, answer) in enumerate(turns):
        if index == 0:
            messages.append({"role": "user", "content": [*visuals, {"type": "text", "text": asked}]})
        else:
            messages.append({"role": "user", "content": asked})
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
    return messages
