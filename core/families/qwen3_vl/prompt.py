"""Qwen3-VL's prompt: the chat layout, the vision placeholder tokens and their expansion.

:func:`build_chat_inputs` renders the tokenizer's chat template, expands its placeholders (per
frame pair of a clip one ``<t.t seconds>`` marker and one vision block, per image one block of
image pads), tokenizes, and records where each item's features go (:class:`VisionSpan`) and what
kind every token is (``mm_token_type_ids``: 0 text, 1 image pad, 2 video pad). It follows
transformers' ``Qwen3VLProcessor``; ``tests/core/families/qwen3_vl/test_processing_parity.py``
checks it against it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from framewise.core.decoding.pruned_positions import UnprunedPrompt
from framewise.core.encoding.defs import VisionItem
from framewise.core.errors import FramewiseError, ModelLoadError
from framewise.core.families.qwen3_vl.chat import chat_messages, time_marker
from framewise.core.families.qwen3_vl.geometry import VisionGeometry
from framewise.core.families.qwen3_vl.processor import VideoInputs
from framewise.core.seam import DecodedAnswer, PieceGrid, VisionSpan

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"

# Values of mm_token_type_ids.
TEXT_TOKEN, IMAGE_TOKEN, VIDEO_TOKEN = 0, 1, 2


@dataclass(frozen=True)
class ChatInputs:
    """Token inputs of the language model, tensors shaped (1, L).

    ``mm_token_type_ids`` marks each token: 0 text, 1 image pad, 2 video pad. ``spans`` place the
    items' features (items numbered clips first, then images; a clip has one span per frame pair);
    ``grids`` give every item's ``(modality, grid_thw)`` in that order. ``prompt_text`` is the text
    that was tokenized, placeholders expanded.

    A prompt about a clip whose video tokens were pruned holds, per frame pair, only the pads of
    the tokens it kept, and its spans point at the kept feature rows; ``unpruned`` is then the
    prompt it was cut from (its positions are the language model's; ``grids`` stay unpruned).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mm_token_type_ids: torch.Tensor
    spans: tuple[VisionSpan, ...]
    grids: tuple[PieceGrid, ...]
    prompt_text: str
    unpruned: UnprunedPrompt | None = None

    @property
    def token_types(self) -> torch.Tensor:
        """The per-token kinds the language model takes (``mm_token_type_ids``)."""
        return self.mm_token_type_ids

    @property
    def text(self) -> str:
        return self.prompt_text


def build_chat_inputs(
    tokenizer: Any,
    question: str,
    *,
    videos: Sequence[VideoInputs] = (),
    images: Sequence[VisionItem] = (),
    history: Sequence[tuple[str, str]] = (),
    geometry: VisionGeometry = VisionGeometry(),
    template_options: Mapping[str, Any] = MappingProxyType({}),
) -> ChatInputs:
    """Token inputs for asking ``question`` about ``videos`` and/or ``images``.

    The prompt comes from the tokenizer's chat template (:func:`chat_messages` lays out the
    turns), rendered with ``template_options`` (keywords the template reads, such as Qwen3.5's
    ``enable_thinking``). Then, as transformers' Qwen3VLProcessor does, each of the template's video pads
    becomes, per frame pair, ``<t.t seconds>`` + vision start + video pad x (h*w/merge^2) + vision
    end (the template's own vision start/end stay around the whole), and each image pad becomes
    (h*w/merge^2) image pads. Special-token ids are looked up in the tokenizer. An earlier answer
    that is a :class:`~framewise.core.seam.DecodedAnswer` enters as its own token ids
    (the text around it is tokenized piece by piece) after what the template opened that answer
    with (:func:`answer_opening`), so the prompt starts with exactly the tokens the decoder's
    state holds. A clip with a ``retention`` takes, per frame pair, only the
    pads of the tokens pruning kept (see :class:`ChatInputs`).

    Raises FramewiseError when a question or answer contains one of the reserved vision
    markers, and ModelLoadError when the tokenizer or its chat template lacks them.
    """
    tokens = _VisionTokens.of(tokenizer)
    tokens.refuse_in(question, *(part for turn in history for part in turn))
    slotted, decoded = _slot_decoded_answers(history, tokenizer, template_options)
    messages = chat_messages(question, videos=len(videos), images=len(images), history=slotted)
    template_text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **template_options
    )
    slotted_text = _expand_placeholders(template_text, tokens, videos, images, geometry.merge_area)

    ids, from_answers = _tokenize_around_answers(tokenizer, slotted_text, decoded)
    token_types = torch.full_like(ids, TEXT_TOKEN)
    token_types[(ids == tokens.image_pad_id) & ~from_answers] = IMAGE_TOKEN
    token_types[(ids == tokens.video_pad_id) & ~from_answers] = VIDEO_TOKEN
    grids = (*(("video", video.item.grid_thw) for video in videos), *(("image", item.grid_thw) for item in images))
    spans = vision_spans(token_types, grids, geometry.merge_area)
    if spans is None:
        raise ModelLoadError(
            f"The tokenizer splits the vision pad tokens ({tokens.image_pad}, {tokens.video_pad}); "
            "use the tokenizer that came with the model."
        )
    inputs = ChatInputs(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=token_types,
        spans=spans,
        grids=grids,
        prompt_text=_fill_answer_slots(slotted_text, decoded),
    )
    if not any(video.retention is not None and video.retention.prunes for video in videos):
        return inputs
    pruned_text = _expand_placeholders(template_text, tokens, videos, images, geometry.merge_area, pruned=True)
    return _pruned(inputs, videos, geometry.merge_area, _fill_answer_slots(pruned_text, decoded))


def _pruned(inputs: ChatInputs, videos: Sequence[VideoInputs], merge_area: int, text: str) -> ChatInputs:
    """``inputs`` (built with every video token) cut to the video tokens the clips' retentions keep;
    ``text`` is the pruned prompt's text."""
    token_types = inputs.mm_token_type_ids
    kept = torch.ones(token_types.shape[1], dtype=torch.bool)
    # The video pads run clip after clip, each clip's in its row order, as the retention masks do.
    masks = [
        torch.ones(video.item.patches // merge_area, dtype=torch.bool) if video.retention is None
        else video.retention.mask
        for video in videos
    ]
    kept[(token_types[0] == VIDEO_TOKEN).nonzero().flatten()] = torch.cat(masks)
    pruned_types = token_types[:, kept]
    kept_per_slice = {
        item: video.retention.kept_per_slice for item, video in enumerate(videos) if video.retention is not None
    }
    spans = vision_spans(pruned_types, inputs.grids, merge_area, kept_per_slice)
    assert spans is not None, "a pruned prompt's pads are the unpruned prompt's, which matched its grids"
    input_ids = inputs.input_ids[:, kept]
    return ChatInputs(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        mm_token_type_ids=pruned_types,
        spans=spans,
        grids=inputs.grids,
        prompt_text=text,
        unpruned=UnprunedPrompt(inputs.input_ids, token_types, kept),
    )


def _slot_decoded_answers(
    history: Sequence[tuple[str, str]], tokenizer: Any, template_options: Mapping[str, Any]
) -> tuple[list[tuple[str, str]], list[DecodedAnswer]]:
    """``history`` with every decoded answer replaced by a numbered slot, and those answers in order,
    each after what the model saw before it (:func:`answer_opening`, its text and token ids)."""
    slotted: list[tuple[str, str]] = []
    decoded: list[DecodedAnswer] = []
    opening = answer_opening(tokenizer, template_options) if history else ""
    opening_ids = tokenizer.encode(opening, add_special_tokens=False) if opening else []
    for asked, answer in history:
        if isinstance(answer, DecodedAnswer):
            slotted.append((asked, _answer_slot(len(decoded))))
            decoded.append(DecodedAnswer(opening + answer, (*opening_ids, *answer.token_ids)))
        else:
            slotted.append((asked, answer))
    return slotted, decoded


def answer_opening(tokenizer: Any, template_options: Mapping[str, Any]) -> str:
    """What the chat template writes after an answer's role header when it asks for an answer (with
    ``template_options``) but not where it shows an earlier answer: Qwen3.5's empty thinking block
    with thinking off, nothing for Qwen3-VL. The model saw it before its answer's tokens."""
    asked = tokenizer.apply_chat_template(
        [{"role": "user", "content": "?"}], tokenize=False, add_generation_prompt=True, **template_options
    )
    shown = tokenizer.apply_chat_template(
        [{"role": "user", "content": "?"}, {"role": "assistant", "content": _answer_slot(0)},
         {"role": "user", "content": "?"}],
        tokenize=False, add_generation_prompt=False, **template_options,
    )
    common = len(os.path.commonprefix([asked, shown]))
    return asked[common:] if shown[common:].startswith(_answer_slot(0)) else ""


def _answer_slot(index: int) -> str:
    """What stands for decoded answer ``index`` in the template's text until its ids replace it."""
    return f"\x00framewise-answer-{index}\x00"


_ANSWER_SLOT = re.compile("\x00framewise-answer-(\\d+)\x00")


def _tokenize_around_answers(
    tokenizer: Any, text: str, answers: Sequence[DecodedAnswer]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``text`` tokenized with each answer slot replaced by that answer's token ids: the ids
    (1, L) int64, and a (1, L) bool mask of the positions the answers' ids fill."""
    ids: list[int] = []
    from_answers: list[bool] = []
    pieces = _ANSWER_SLOT.split(text)  # text, slot number, text, slot number, ..., text
    for position, piece in enumerate(pieces):
        piece_ids = list(answers[int(piece)].token_ids) if position % 2 else tokenizer.encode(piece, add_special_tokens=False)
        ids += piece_ids
        from_answers += [bool(position % 2)] * len(piece_ids)
    return torch.tensor([ids], dtype=torch.long), torch.tensor([from_answers], dtype=torch.bool)


def _fill_answer_slots(text: str, answers: Sequence[DecodedAnswer]) -> str:
    return _ANSWER_SLOT.sub(lambda match: str(answers[int(match.group(1))]), text)


def vision_spans(
    token_types: torch.Tensor,
    grids: Sequence[PieceGrid],
    merge_area: int,
    kept_per_slice: Mapping[int, Sequence[int]] | None = None,
) -> tuple[VisionSpan, ...] | None:
    """Where the features of items of ``grids`` ((modality, grid_thw) each, in item order) go in
    a prompt of ``token_types`` (1, L): one span per run of that modality's pads, a clip's frame
    pairs and the images each in order. ``kept_per_slice`` gives, for an item pruned, the tokens
    each of its slices kept (a slice that kept none has no run); its spans then point at the kept
    rows. ``None`` when the runs do not match the grids (a tokenizer that does not keep every pad
    a token of its own)."""
    spans: list[VisionSpan] = []
    for modality, token_type in (("video", VIDEO_TOKEN), ("image", IMAGE_TOKEN)):
        runs = _runs(token_types[0] == token_type)
        slices = _slices_with_tokens(grids, modality, merge_area, kept_per_slice or {})
        if len(runs) != len(slices) or any(length != tokens for (_, length), (*_, tokens) in zip(runs, slices)):
            return None
        spans += [VisionSpan(item, start, length, row=row) for (start, length), (item, row, _) in zip(runs, slices)]
    return tuple(sorted(spans, key=lambda span: span.start))


def _slices_with_tokens(
    grids: Sequence[PieceGrid], modality: str, merge_area: int, kept_per_slice: Mapping[int, Sequence[int]]
) -> list[tuple[int, int, int]]:
    """(item, first feature row, tokens) of every slice of ``modality``'s items that holds tokens
    in the prompt, in order: each slice's h*w/merge_area tokens, or what ``kept_per_slice`` says."""
    slices = []
    for item, (kind, (t, h, w)) in enumerate(grids):
        if kind != modality:
            continue
        row = 0
        for tokens in kept_per_slice.get(item, (h * w // merge_area,) * t):
            if tokens:
                slices.append((item, row, tokens))
            row += tokens
    return slices


def _runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    """(start, length) of every run of True in the 1-D ``mask``, in order."""
    padded = torch.cat([torch.zeros(1, dtype=torch.int8), mask.to(torch.int8), torch.zeros(1, dtype=torch.int8)])
    edges = torch.diff(padded)
    starts = (edges == 1).nonzero().flatten().tolist()
    ends = (edges == -1).nonzero().flatten().tolist()
    return [(start, end - start) for start, end in zip(starts, ends)]


@dataclass(frozen=True)
class _VisionTokens:
    """The tokenizer's vision marker tokens and the ids of its two pad tokens."""

    vision_start: str
    vision_end: str
    image_pad: str
    video_pad: str
    image_pad_id: int
    video_pad_id: int

    @property
    def reserved(self) -> tuple[str, ...]:
        return (self.vision_start, self.vision_end, self.image_pad, self.video_pad)

    def refuse_in(self, *texts: str) -> None:
        """Raise FramewiseError when any of ``texts`` holds a reserved vision marker."""
        for text in texts:
            for marker in self.reserved:
                if marker in text:
                    raise FramewiseError(f"The text contains the reserved marker {marker}; remove it and ask again.")

    @classmethod
    def of(cls, tokenizer: Any) -> _VisionTokens:
        # A tokenizer may name its own vision tokens; transformers reads the same attributes.
        names = [
            getattr(tokenizer, attribute, None) or default
            for attribute, default in (
                ("vision_start_token", VISION_START),
                ("vision_end_token", VISION_END),
                ("image_token", IMAGE_PAD),
                ("video_token", VIDEO_PAD),
            )
        ]
        ids = []
        for token in names:
            token_id = tokenizer.convert_tokens_to_ids(token)
            if token_id is None or token_id == tokenizer.unk_token_id:
                raise ModelLoadError(
                    f"The tokenizer has no {token} token, so it cannot take pictures or clips; "
                    "use a Qwen3-VL checkpoint's tokenizer."
                )
            ids.append(token_id)
        return cls(*names, image_pad_id=ids[2], video_pad_id=ids[3])


def _expand_placeholders(
    text: str,
    tokens: _VisionTokens,
    videos: Sequence[VideoInputs],
    images: Sequence[VisionItem],
    merge_area: int,
    pruned: bool = False,
) -> str:
    """``text`` with the template's placeholders expanded: every video token's pad, or with
    ``pruned`` only the pads of the tokens each clip's retention keeps."""
    found_videos = text.count(tokens.video_pad)
    found_images = text.count(tokens.image_pad)
    if found_videos != len(videos) or found_images != len(images):
        raise ModelLoadError(
            f"The chat template placed {found_videos} clip(s) and {found_images} image(s) where "
            f"{len(videos)} and {len(images)} were given; use a Qwen3-VL chat template."
        )
    image_blocks = iter(tokens.image_pad * (item.patches // merge_area) for item in images)
    video_blocks = iter(_video_blocks(tokens, video, merge_area, pruned) for video in videos)

    def expand(match: re.Match[str]) -> str:
        return next(image_blocks if match.group() == tokens.image_pad else video_blocks)

    pattern = "|".join(re.escape(token) for token in (tokens.video_pad, tokens.image_pad))
    return re.sub(pattern, expand, text)


def _video_blocks(tokens: _VisionTokens, video: VideoInputs, merge_area: int, pruned: bool = False) -> str:
    """Per frame pair of ``video``: its time marker and its vision block, holding a pad for each of
    the pair's tokens (with ``pruned``, each it kept)."""
    t, h, w = video.item.grid_thw
    if len(video.pair_timestamps) != t:
        raise ValueError(f"{len(video.pair_timestamps)} pair timestamps for {t} frame pairs")
    retention = video.retention
    if retention is not None and (retention.grid[0] != t or retention.total != t * h * w // merge_area):
        raise ValueError(f"a retention of grid {retention.grid} for a clip of {t} frame pairs of {h}x{w} patches")
    counts = retention.kept_per_slice if pruned and retention is not None else (h * w // merge_area,) * t
    return "".join(
        f"{time_marker(seconds)}{tokens.vision_start}{tokens.video_pad * count}{tokens.vision_end}"
        for seconds, count in zip(video.pair_timestamps, counts)
    )
