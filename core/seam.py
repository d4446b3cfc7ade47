"""The plain types of the model-family seam, at the bottom of core: a family's vision limits, where
vision features go in a prompt, a decoded answer that keeps its token ids, and the grid of one
piece of a vision item.

Settings validation, clip sampling, encoder planning, the events and the decoder read these
instead of a family's constants and token ids; the family's own package supplies the values. This
module imports nothing of Framewise, so everything that uses it sits above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# One piece of an item as a tower pass sees it: its modality and the grid (slices, h, w) of those slices.
PieceGrid = tuple[str, tuple[int, int, int]]


@dataclass(frozen=True)
class FamilyLimits:
    """The sizes and bounds of one model family's vision input, as the generic code reads them.

    ``patch_size``: side of one patch in pixels; ``merge_size``: patches per side merged into one
    language-model token; ``frames_per_slice``: frames one attention sequence of the tower covers
    (a clip's frame count is a multiple of it); ``max_frames``: the most frames one clip may have;
    ``max_clip_blocks``: the most merge blocks (``block_side`` squared pixels each) a whole clip's
    frames may hold together. ``released_frames`` and ``released_clip_blocks`` are the same bounds
    in the family's own released preprocessing, where they are lower (``None``: the same). ``name``
    is the family as messages name it.
    """

    name: str
    patch_size: int
    merge_size: int
    frames_per_slice: int
    max_frames: int
    max_clip_blocks: int
    released_frames: int | None = None
    released_clip_blocks: int | None = None

    @property
    def patch_pixels(self) -> int:
        """Pixels of one frame in one patch."""
        return self.patch_size * self.patch_size

    @property
    def merge_area(self) -> int:
        """Patches merged into one language-model token."""
        return self.merge_size * self.merge_size

    @property
    def block_side(self) -> int:
        """Frame sides are multiples of this: one merge block, in pixels."""
        return self.patch_size * self.merge_size

    @property
    def block_pixels(self) -> int:
        """Pixels of one frame in one merge block."""
        return self.block_side * self.block_side

    @property
    def budget_multiple(self) -> int:
        """Every token budget of the encoder is a multiple of this (whole merge blocks)."""
        return self.merge_area

    @property
    def pixels_per_video_token(self) -> int:
        """Pixels of a clip (frames x height x width) that become one video token."""
        return self.frames_per_slice * self.block_pixels

    @property
    def max_clip_pixels(self) -> int:
        """The most pixels (frames x height x width) of one sampled clip."""
        return self.max_clip_blocks * self.block_pixels

    @property
    def released_clip_pixels(self) -> int:
        """The most pixels of one clip in the family's released preprocessing."""
        return (self.released_clip_blocks or self.max_clip_blocks) * self.block_pixels

    def video_tokens(self, pixels: int) -> int:
        """The language-model tokens a clip of ``pixels`` (frames x height x width) becomes."""
        return pixels // self.pixels_per_video_token

    @property
    def max_budget(self) -> int:
        """The largest token budget worth capturing: the patches of the largest clip."""
        return self.max_clip_pixels // self.patch_pixels

    def frames_rule(self) -> str:
        """Why frame counts are multiples of ``frames_per_slice``, in a few words for messages."""
        if self.frames_per_slice == 1:
            return "frames are encoded one by one"
        if self.frames_per_slice == 2:
            return "frames are encoded in pairs"
        return f"frames are encoded in groups of {self.frames_per_slice}"


class DecodedAnswer(str):
    """An answer's text that also keeps the token ids it was decoded from (end-of-answer token
    left out).

    A follow-up prompt splices these ids where the answer goes instead of tokenizing the text
    again: the text need not tokenize back to the same ids, and the decoder's cache holds the ids,
    so only then does a follow-up prefill just its new tokens. Compares and prints as its text.
    """

    token_ids: tuple[int, ...]

    def __new__(cls, text: str, token_ids: Sequence[int]) -> DecodedAnswer:
        answer = super().__new__(cls, text)
        answer.token_ids = tuple(token_ids)
        return answer


@dataclass(frozen=True)
class VisionSpan:
    """Where encoded vision features go in a prompt's token sequence.

    Tokens ``start .. start + length - 1`` take rows ``row .. row + length - 1`` of the encoded
    features of item ``item`` (its index among the prompt's items). An item may have several spans
    (one per frame pair of a clip, with text between them); spans do not overlap.
    """

    item: int
    start: int
    length: int
    row: int = 0

    @property
    def end(self) -> int:
        """The token index just past the span."""
        return self.start + self.length
