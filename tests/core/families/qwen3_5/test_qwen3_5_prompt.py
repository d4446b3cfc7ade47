"""Qwen3.5's prompt through its family, with a chat template that behaves as Qwen3.5's does: asked
without thinking, time markers and vision blocks as Qwen3-VL's, and a follow-up that begins with
exactly the tokens the decoder's state holds after the first answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from framewise.core.families import family_for
from framewise.core.families.qwen3_vl.prompt import answer_opening
from framewise.core.seam import DecodedAnswer
from tests.core.families.qwen3_5.checkpoint import write_tiny_checkpoint
from training.demo_model import build_demo_tokenizer

QWEN3_5 = family_for("qwen3_5")
EMPTY_THINKING = "<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("prompt") / "tiny")
    return AutoTokenizer.from_pretrained(Path(folder))


def clip(family=QWEN3_5):
    """Four 64x96 frames at 0.0 to 1.5 s: two frame pairs of 2x3 tokens."""
    frames = np.random.default_rng(0).integers(0, 256, (4, 64, 96, 3), dtype=np.uint8)
    return family.preprocess_video(frames, [0.0, 0.5, 1.0, 1.5], family.limits)


def answered(tokenizer, text: str) -> DecodedAnswer:
    """An answer as the decoder hands it back: its text and the ids it was decoded from."""
    return DecodedAnswer(text, tokenizer.encode(text, add_special_tokens=False))


def test_the_question_is_asked_without_thinking_after_qwen3_vls_time_markers(tokenizer) -> None:
    inputs = QWEN3_5.build_prompt(tokenizer, "What moves?", videos=[clip()], limits=QWEN3_5.limits)
    assert inputs.text.endswith("What moves?<|im_end|>\n<|im_start|>assistant\n" + EMPTY_THINKING)
    assert inputs.text.count("<0.2 seconds><|vision_start|>") == 1 and "<1.2 seconds><|vision_start|>" in inputs.text
    assert [(span.item, span.length) for span in inputs.spans] == [(0, 6), (0, 6)]


def test_the_opening_is_what_the_template_asks_with_and_does_not_show_for_earlier_answers(tokenizer) -> None:
    assert answer_opening(tokenizer, QWEN3_5.chat_template_options) == EMPTY_THINKING
    assert answer_opening(tokenizer, {}) == "<think>\n"  # thinking on: the model writes the rest
    assert answer_opening(build_demo_tokenizer(), {}) == ""  # Qwen3-VL's template opens with nothing


@pytest.mark.parametrize("family_name", ["qwen3_5", "qwen3_vl"])
def test_a_follow_up_begins_with_the_first_prompt_and_the_answers_ids(tokenizer, family_name: str) -> None:
    family = family_for(family_name)
    tokens = tokenizer if family_name == "qwen3_5" else build_demo_tokenizer()
    video = clip(family)
    first = family.build_prompt(tokens, "What moves?", videos=[video], limits=family.limits)
    answer = answered(tokens, "A ball, twice.")
    second = family.build_prompt(tokens, "Where?", videos=[video], history=[("What moves?", answer)],
                                 limits=family.limits)
    held = torch.cat([first.input_ids, torch.tensor([answer.token_ids])], dim=1)
    assert torch.equal(second.input_ids[:, : held.shape[1]], held)
    assert second.spans == first.spans
    assert (second.token_types[0, held.shape[1]:] == 0).all()


def test_an_earlier_answer_given_as_text_is_shown_as_the_template_shows_it(tokenizer) -> None:
    inputs = QWEN3_5.build_prompt(tokenizer, "Where?", videos=[clip()], history=[("What moves?", "A ball.")],
                                  limits=QWEN3_5.limits)
    assert "<|im_start|>assistant\nA ball.<|im_end|>" in inputs.text
    assert inputs.text.endswith("Where?<|im_end|>\n<|im_start|>assistant\n" + EMPTY_THINKING)
