"""The device memory a model will take, by part, and whether it fits before anything is loaded.

A model family estimates the parts from a checkpoint's config
(:meth:`~framewise.core.families.base.ModelFamily.estimate_memory`); this module words the
estimate and, when it exceeds what the device has, names the settings that would fit instead.
Once loaded, :class:`HeldMemory` is what the model was measured to hold, by the same parts
(:mod:`framewise.core.held_memory` measures it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes each part of a loaded model takes on the device; ``clip_features`` is what the tower's
    output for the largest clip the sampling settings allow holds while that clip is open (not at
    load: a clip brings it); ``allocator_rounding`` is what the caching allocator reserves beyond
    the parts' tensors."""

    weights: int
    kv_cache: int
    encoder_graphs: int
    decode_graphs: int
    allocator_rounding: int = 0
    clip_features: int = 0

    @property
    def total(self) -> int:
        return self.at_load + self.clip_features

    @property
    def at_load(self) -> int:
        """What loading takes, before any clip is opened."""
        return self.weights + self.kv_cache + self.encoder_graphs + self.decode_graphs + self.allocator_rounding

    def describe(self) -> str:
        """One line: the total and its parts (:func:`size_text`)."""
        rounding = f", allocator rounding {size_text(self.allocator_rounding)}" if self.allocator_rounding else ""
        clip = f", the largest clip's features {size_text(self.clip_features)}" if self.clip_features else ""
        return (
            f"about {size_text(self.total)} (weights {size_text(self.weights)}, KV cache {size_text(self.kv_cache)}, "
            f"encoder graphs {size_text(self.encoder_graphs)}, decode graphs {size_text(self.decode_graphs)}"
            f"{clip}{rounding})"
        )


@dataclass(frozen=True)
class Alternative:
    """A change of settings (in words, naming the setting) and the estimate it gives."""

    change: str
    estimate: MemoryEstimate


def shortfall_message(
    what: str, estimate: MemoryEstimate, available: int, device: str, alternatives: list[Alternative]
) -> str:
    """Why ``what`` (model and dtype) does not fit in ``available`` bytes of ``device``, and the
    ``alternatives`` that would (the others are left out); the CPU when none does."""
    fitting = [alternative for alternative in alternatives if alternative.estimate.total <= available]
    advice = "; or ".join(f"{a.change} (about {a.estimate.total / GIB:.1f} GiB)" for a in fitting)
    return (
        f"{what} needs {estimate.describe()} on {device}, but {available / GIB:.1f} GiB is available there. "
        + (f"To fit, {advice}." if advice else "No smaller setting fits: choose a smaller model, or the CPU (device cpu).")
    )


def short_dtype_name(dtype: str) -> str:
    """A torch dtype's name (without its prefix) as people write it: ``bfloat16`` is ``bf16``, a
    float of N bits ``fpN`` (whatever its exponent and mantissa split), anything else as it is."""
    if dtype == "bfloat16":
        return "bf16"
    bits = re.match(r"float(\d+)", dtype)
    return f"fp{bits.group(1)}" if bits else dtype


def size_text(size: int) -> str:
    """``size`` bytes in GiB from one GiB on, in MiB from one MiB on, else in KiB ("16.4 GiB",
    "17.2 MiB", "32.0 KiB")."""
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


@dataclass(frozen=True)
class WeightBytes:
    """The bytes of one part's weights (``"language model"``, ``"vision tower"``) held in one dtype
    (torch's name without its prefix: ``"bfloat16"``, ``"float8_e4m3fn"``, ``"float32"``)."""

    part: str
    dtype: str
    size: int


@dataclass(frozen=True)
class HeldMemory:
    """What a loaded model holds on its device, measured while the engine built it.

    ``weights`` are tensor bytes: the parameters and the weight buffers (quantized weights and their
    scales), by part and dtype. ``kv_cache`` is the decoder's cache tensors. ``encoder_graphs`` and
    ``decode_graphs`` are what the caching allocator's reserved memory grew by while the graphs were
    captured (their pools, static buffers and workspaces; 0 without graphs).

    ``host_weights`` are the bytes of weights kept in the host's memory instead (an untied input
    embedding on CUDA); they are not part of :attr:`total`.

    ``reserved`` (on CUDA; ``None`` elsewhere) is what the reserved memory grew by over the three
    build steps (loading the weights, building the encoder, building the decoder): the process's
    share of the device for this model. :attr:`beyond` is the part of it none of the parts above
    accounts for: the rounding of the allocator's blocks, segments the loading left partly used,
    and what a build step keeps besides its part.
    """

    weights: tuple[WeightBytes, ...]
    kv_cache: int
    encoder_graphs: int
    decode_graphs: int
    reserved: int | None = None
    host_weights: int = 0

    @property
    def weight_total(self) -> int:
        return sum(share.size for share in self.weights)

    @property
    def total(self) -> int:
        """The parts together: weights, KV cache, encoder graphs, decode graphs."""
        return self.weight_total + self.kv_cache + self.encoder_graphs + self.decode_graphs

    @property
    def beyond(self) -> int | None:
        """Reserved bytes beyond the parts (``None`` where nothing was reserved: on the CPU)."""
        return None if self.reserved is None else self.reserved - self.total

    def weights_text(self) -> str:
        """The weights by part and dtype: "language model 7.2 GiB fp16 + 9.0 MiB fp32; vision tower ...",
        each dtype by :func:`short_dtype_name`."""
        parts = dict.fromkeys(share.part for share in self.weights)
        return "; ".join(
            f"{part} " + " + ".join(
                f"{size_text(share.size)} {short_dtype_name(share.dtype)}"
                for share in self.weights if share.part == part
            )
            for part in parts
        )

    def amount_text(self) -> str:
        """How much is held in all: "17.9 GiB of device memory" (the reserved memory on CUDA)."""
        if self.reserved is None:
            return f"{size_text(self.total)} of memory"
        return f"{size_text(self.reserved)} of device memory"

    def lines(self) -> list[str]:
        """One phrase per part, for a person: "weights 16.4 GiB (...)", "KV cache 1.1 GiB", ..."""
        lines = [
            f"weights {size_text(self.weight_total)} ({self.weights_text()})",
            f"KV cache {size_text(self.kv_cache)}",
        ]
        if self.encoder_graphs:
            lines.append(f"encoder graphs {size_text(self.encoder_graphs)}")
        if self.decode_graphs:
            lines.append(f"decode graphs {size_text(self.decode_graphs)}")
        if self.beyond is not None:
            lines.append(f"reserved beyond them {size_text(max(self.beyond, 0))}")
        if self.host_weights:
            lines.append(f"and in host memory the input embedding, {size_text(self.host_weights)}")
        return lines

    def describe(self) -> str:
        """One line: "17.9 GiB of device memory: weights ..., KV cache ..., ..."."""
        return f"{self.amount_text()}: {', '.join(self.lines())}"
