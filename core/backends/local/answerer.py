"""Answers from the local engine's decoder: the prompt, its fit in the context, the decoding, the
streamed tokens and the answer's numbers.

:class:`Answerer` builds the model family's prompt for a question about the open items after the
conversation so far, refuses before anything runs a prompt that leaves the context no room for an
answer (:class:`~framewise.core.errors.QuestionTooLongError`, in
:class:`~framewise.core.settings.ContextNeed`'s words), decodes with the
:class:`~framewise.core.decoding.Decoder` (which prefills only what its cache does not already
hold) and streams the text as it is decoded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch

from framewise.core.backends.base import Emit, Turns
from framewise.core.backends.cancel import CancelScope
from framewise.core.backends.local.cancel_points import cancel_points
from framewise.core.backends.local.clip_encoder import EncodedClip
from framewise.core.backends.local.parts import ModelParts
from framewise.core.decoding import Decoded, Prompt, SamplingRule
from framewise.core.errors import CancelledError, ContextFullError, QuestionTooLongError
from framewise.core.events import AnswerStats, DecoderStats, Done, EventSink, Token
from framewise.core.families.base import PromptInputs
from framewise.core.loading import LoadedModel
from framewise.core.metrics import DecodeSpeedMeter, decode_rate, percentile
from framewise.core.seam import DecodedAnswer
from framewise.core.settings import FEWER_ITEMS_ADVICE, SENTENCE_QUESTION_TOKENS, ContextNeed, GenerationSettings
from framewise.core.wording import plural


class Answerer:
    """Answers questions with the model and decoder in ``parts``, streaming Token and AnswerSpeed
    events to ``emit`` and stopping when the request's ``cancel`` scope says so."""

    def __init__(self, parts: ModelParts, emit: Emit, cancel: CancelScope) -> None:
        self.parts = parts
        self._emit = emit
        self._cancel = cancel

    def answer(
        self, question: str, clips: Sequence[EncodedClip], turns: Turns, generation: GenerationSettings
    ) -> tuple[Done, DecodedAnswer | None]:
        """Answer ``question`` about ``clips`` (the conversation's items, in order) after ``turns``.

        Returns the :class:`Done` to send and the answer to keep as the turn's, ``None`` when the
        answer was cancelled (it ends early, with ``stats.cancelled`` set, and is not kept).
        """
        loaded = self.parts.require_model()
        started = time.perf_counter()
        items = _in_prompt_order(clips)
        inputs = self._build_prompt(question, items, turns)
        self._check_prompt_fits(inputs, question, items, generation)
        streamer = _TokenStreamer(loaded.tokenizer, self._emit)
        try:
            # Inside the prefill (until the first token); the token loop checks between tokens.
            prefilling = lambda: streamer.speed.first_token_time is None  # noqa: E731
            with cancel_points(loaded.family.cancel_points(loaded.model).language, self._cancel, while_=prefilling):
                # Items are only ever added or all replaced, so the newest one names the whole set.
                decoded = self._decode(inputs, items, clips[-1] if clips else None, streamer, generation)
        except CancelledError:  # before the first token: during the prefill, or before it began
            decoded = Decoded(prompt_tokens=int(inputs.input_ids.shape[1]), stop_reason="cancelled")
        streamer.end()
        finished = time.perf_counter()

        cancelled = decoded.stop_reason == "cancelled"
        text = streamer.text.strip()
        stats = self._answer_stats(started, finished, streamer, decoded)
        kept = None if cancelled else _decoded_answer(text, decoded.token_ids, loaded)
        return Done(text=text, stats=stats, kept=not cancelled), kept

    def _build_prompt(
        self, question: str, items: Sequence[EncodedClip], history: Sequence[tuple[str, str]] = ()
    ) -> PromptInputs:
        """The family's prompt for ``question`` about ``items`` (in prompt order) after ``history``."""
        loaded = self.parts.require_model()
        return loaded.family.build_prompt(
            loaded.tokenizer,
            question,
            videos=[item.video for item in items if item.video is not None],
            images=[item.image for item in items if item.image is not None],
            history=history,
            limits=loaded.limits,
        )

    def _check_prompt_fits(
        self, inputs: PromptInputs, question: str, items: Sequence[EncodedClip], generation: GenerationSettings
    ) -> None:
        """Refuse, before any of it runs, a prompt that leaves the decoder's context no room for one
        answer, saying whether the question itself (with the open ``items``) or the conversation
        grown around it is too long (QuestionTooLongError), in :class:`ContextNeed`'s words."""
        context = self.parts.require_decoder().max_tokens
        prompt_tokens = int(inputs.input_ids.shape[1])
        if prompt_tokens + generation.max_new_tokens <= context:
            return
        need = self._context_need(question, items, prompt_tokens, generation)
        if need.earlier and dataclasses.replace(need, earlier=0).fits(context):
            raise QuestionTooLongError(
                f"With this question the context must hold {need.describe()}, more than its {context:,}. "
                "Start a new conversation (File ▸ New Conversation) and ask again."
            )
        room = need.room_for_question(context)
        advice = f"Shorten the question to at most {room:,} tokens." if room >= SENTENCE_QUESTION_TOKENS else FEWER_ITEMS_ADVICE
        raise QuestionTooLongError(
            f"This question is {need.question:,} tokens, and with it the context must hold {need.describe()}, "
            f"more than its {context:,}. {advice}"
        )

    def check_items_fit(self, clips: Sequence[EncodedClip], generation: GenerationSettings) -> None:
        """Refuse the last of ``clips`` (the open items, then the one being added) when with it they
        leave the decoder's context no room for the shortest question and one answer: said as it is
        added (ContextFullError, in :class:`ContextNeed`'s words), not at the next question."""
        context = self.parts.require_decoder().max_tokens
        items = _in_prompt_order(clips)
        shortest = "?"
        prompt_tokens = int(self._build_prompt(shortest, items).input_ids.shape[1])
        if prompt_tokens + generation.max_new_tokens <= context:
            return
        need = dataclasses.replace(
            self._context_need(shortest, items, prompt_tokens, generation), items_words=f"the {len(clips)} items with it"
        )
        raise ContextFullError(
            f"With {clips[-1].summary.clip_name} the items leave no room for a question: even the shortest needs "
            f"{need.describe()}, more than the context's {context:,}. The conversation goes on with the "
            f"{plural(len(clips) - 1, 'item')} it had. {FEWER_ITEMS_ADVICE}"
        )

    def _context_need(
        self, question: str, items: Sequence[EncodedClip], prompt_tokens: int, generation: GenerationSettings
    ) -> ContextNeed:
        """The ``prompt_tokens`` of ``question`` about ``items`` after the conversation so far, part by part."""
        alone = int(self._build_prompt(question, items).input_ids.shape[1])
        text_only = int(self._build_prompt(question, []).input_ids.shape[1])
        question_tokens = len(self.parts.require_model().tokenizer.encode(question, add_special_tokens=False))
        return ContextNeed(
            items=alone - text_only,
            question=question_tokens,
            answer=generation.max_new_tokens,
            template=text_only - question_tokens,
            earlier=prompt_tokens - alone,
            items_words=_items_words(items),
        )

    def _decode(
        self,
        inputs: PromptInputs,
        items: Sequence[EncodedClip],
        owner: EncodedClip | None,
        streamer: _TokenStreamer,
        generation: GenerationSettings,
    ) -> Decoded:
        """Decode the answer to ``inputs`` with the features of ``items`` (in prompt order), streaming
        through ``streamer``; ``owner`` names the set of items the decoder's cache may hold already."""
        loaded = self.parts.require_model()
        prompt = Prompt(
            input_ids=inputs.input_ids,
            token_types=inputs.token_types,
            spans=inputs.spans,
            grids=inputs.grids,
            items=tuple(item.features for item in items),
            owner=owner,
            unpruned=inputs.unpruned,
        )
        rule = SamplingRule(
            max_new_tokens=generation.max_new_tokens,
            temperature=generation.temperature,
            eos_token_ids=_eos_token_ids(loaded),
        )
        return self.parts.require_decoder().answer(prompt, rule, streamer.put, self._cancel.is_set)

    def _answer_stats(
        self, started: float, finished: float, streamer: _TokenStreamer, decoded: Decoded
    ) -> AnswerStats:
        loaded = self.parts.require_model()
        new_tokens = len(decoded.token_ids)
        first = streamer.speed.first_token_time or finished
        gpu_memory_mb = None
        if loaded.device.type == "cuda":
            gpu_memory_mb = torch.cuda.max_memory_allocated(loaded.device) / 2**20
        return AnswerStats(
            time_to_first_token_ms=(first - started) * 1e3,
            new_tokens=new_tokens,
            tokens_per_second=decode_rate(new_tokens, first, finished),
            cancelled=decoded.stop_reason == "cancelled",
            gpu_memory_mb=gpu_memory_mb,
            decoder=self._decoder_stats(decoded),
        )

    def _decoder_stats(self, decoded: Decoded) -> DecoderStats:
        decoder = self.parts.require_decoder()
        steps = sorted(decoded.step_ms)
        mean = sum(steps) / len(steps) if steps else None
        return DecoderStats(
            graphs_enabled=decoder.graphs_enabled,
            graph_steps=decoded.graph_steps,
            eager_steps=decoded.eager_steps,
            prompt_tokens=decoded.prompt_tokens,
            prefix_tokens_reused=decoded.prefix_tokens_reused,
            prefill_tokens=decoded.prompt_tokens - decoded.prefix_tokens_reused,
            prefill_ms=decoded.prefill_ms,
            tokens_per_second=1e3 / mean if mean else 0.0,
            ms_per_token_mean=mean,
            ms_per_token_p99=percentile(steps, 99),
            context_tokens=decoder.max_tokens,
            stop_reason=decoded.stop_reason,
        )


class _TokenStreamer:
    """Turns generated token ids into :class:`Token` events of decoded text, and the speed so far
    into :class:`~framewise.core.events.AnswerSpeed` events.

    The whole answer is re-decoded each step and only the new suffix is sent, so tokens that
    split a multi-byte character are held back until the character is complete.
    """

    def __init__(self, tokenizer: Any, sink: EventSink) -> None:
        self.tokenizer = tokenizer
        self.sink = sink
        self.token_ids: list[int] = []
        self.text = ""
        self.speed = DecodeSpeedMeter()

    def put(self, token_id: int) -> None:
        """Take the next generated token."""
        speed = self.speed.add()
        if speed is not None:
            self.sink(speed)
        self.token_ids.append(token_id)
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        if len(text) > len(self.text):
            self.sink(Token(text[len(self.text):]))
        self.text = text

    def end(self) -> None:
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        if len(text) > len(self.text):
            self.sink(Token(text[len(self.text):]))
        self.text = text


def _in_prompt_order(clips: Sequence[EncodedClip]) -> list[EncodedClip]:
    """``clips`` in the order the family's prompt numbers them: clips first, then pictures."""
    return sorted(clips, key=lambda item: item.kind == "image")


def _items_words(items: Sequence[EncodedClip]) -> str:
    """What a question's items are, in a context message's words."""
    if len(items) == 1:
        return f"the {'picture' if items[0].kind == 'image' else 'clip'} {items[0].summary.clip_name}"
    return f"the {len(items)} open items" if items else "no clip"


def _decoded_answer(text: str, token_ids: Sequence[int], loaded: LoadedModel) -> DecodedAnswer:
    """The answer ``text`` with the ids it was decoded from, less the end-of-answer token the
    decoder never feeds back (the chat layout closes the turn with its own)."""
    ids = list(token_ids)
    if ids and ids[-1] in _eos_token_ids(loaded):
        ids.pop()
    return DecodedAnswer(text, ids)


def _eos_token_ids(loaded: LoadedModel) -> frozenset[int]:
    """The ids that end an answer, from the model's generation config (as ``generate()`` reads them)."""
    eos = loaded.model.generation_config.eos_token_id
    if eos is None:
        eos = loaded.tokenizer.eos_token_id
    return frozenset(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
