"""Whether a conversation's clips and pictures can reach a vLLM server as the model's own prompt lays
them out, and fit the server's context: checked here before anything is sent.

vLLM 0.32 takes one set of frame times per request for all of its videos (see
:mod:`~framewise.core.backends.vllm.request`), so a clip sampled at other times than the first (a
closer look at a span, or a clip of another length) has no layout there that equals this machine's
prompt: sent as timed pictures, each frame takes the vision tokens a frame pair takes in a video,
and the model reads a layout it was not given on this machine. It is refused, saying why. What a request carries (videos and pictures) is said as each item is added,
so a server started with lower limits than the offered serve command is no surprise.
"""

from __future__ import annotations

from typing import Sequence

from framewise.core.backends.vllm.errors import CONTEXT_ADVICE
from framewise.core.backends.vllm.family import served_family
from framewise.core.backends.vllm.request import RemoteClip
from framewise.core.errors import ServerContextError, ServerLayoutError
from framewise.core.wording import plural

# Tokens each slice of a video takes in the prompt beside its vision tokens, at the least: its
# vision start and end tokens and a time marker of one token or more.
LEAST_TOKENS_AROUND_A_SLICE = 3


def check_one_timeline(clips: Sequence[RemoteClip]) -> None:
    """Raise :class:`ServerLayoutError` when a clip of ``clips`` (in the order they were opened) is
    sampled at other times than the first: a vLLM server cannot take both in one request as the
    model's prompt lays them out."""
    videos = [clip for clip in clips if clip.kind == "video"]
    for clip in videos[1:]:
        if clip.media_io_kwargs != videos[0].media_io_kwargs:
            raise ServerLayoutError(
                f"{clip.summary.clip_name} cannot go to the vLLM server beside {videos[0].summary.clip_name}: its "
                f"frames are at other times ({_times_words(clip)}, where the other has {_times_words(videos[0])}), "
                "and vLLM takes one set of frame times per question for all of its clips, so no request would "
                "read as the model's prompt does on this machine. Ask about it in a conversation of its own, or "
                "with this machine answering (Settings ▸ Backend ▸ This machine)."
            )


def check_fits_context(clips: Sequence[RemoteClip], max_new_tokens: int, context_tokens: int | None) -> None:
    """Raise :class:`ServerContextError` when ``clips`` and one answer of ``max_new_tokens`` cannot
    fit ``context_tokens`` (the server's ``max_model_len``; nothing is checked when it is unknown)."""
    if context_tokens is None:
        return
    least = least_clip_tokens(clips)
    if least + max_new_tokens <= context_tokens:
        return
    raise ServerContextError(
        f"The server's context holds {context_tokens:,} tokens (its --max-model-len), and the clips of this "
        f"conversation take at least {least:,} of them, with {max_new_tokens:,} more for one answer (max new "
        f"tokens). {CONTEXT_ADVICE}"
    )


def least_clip_tokens(clips: Sequence[RemoteClip]) -> int:
    """The fewest prompt tokens the clips (videos) of ``clips`` take on the server: their vision
    tokens, which the frames' sizes fix (the server keeps the size Framewise sent), and the tokens
    around each slice of frames. Pictures, which the server may resize, are not counted."""
    limits = served_family().limits
    total = 0
    for clip in clips:
        if clip.kind != "video":
            continue
        slices = -(-clip.summary.frames // limits.frames_per_slice)
        total += clip.summary.patches // limits.merge_area + slices * LEAST_TOKENS_AROUND_A_SLICE
    return total


def items_words(clips: Sequence[RemoteClip]) -> str:
    """What a request with ``clips`` carries, as the server's ``--limit-mm-per-prompt`` counts it:
    ``"2 videos and 1 image"``."""
    videos = sum(clip.kind == "video" for clip in clips)
    images = len(clips) - videos
    parts = [plural(count, noun) for count, noun in ((videos, "video"), (images, "image")) if count]
    return " and ".join(parts)


def _times_words(clip: RemoteClip) -> str:
    times = clip.summary.timestamps
    return f"{plural(len(times), 'frame')} from {times[0]:.2f} s to {times[-1]:.2f} s" if times else "no frames"
