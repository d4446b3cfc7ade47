"""The device memory a model will take, by part, and whether it fits before anything is loaded.

A model family estimates the parts from a checkpoint's config
(:meth:`~framewise.core.families.base.ModelFamily.estimate_memory`); this module words the
estimate and, when it exceeds what the device has, names the settings that would fit instead.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes each part of a loaded model takes on the device."""

    weights: int
    kv_cache: int
    encoder_graphs: int
    decode_graphs: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.encoder_graphs + self.decode_graphs

    def describe(self) -> str:
        """One line: the total and its parts, in GiB."""
        return (
            f"about {self.total / GIB:.1f} GiB (weights {self.weights / GIB:.1f}, KV cache {self.kv_cache / GIB:.1f}, "
            f"encoder graphs {self.encoder_graphs / GIB:.1f}, decode graphs {self.decode_graphs / GIB:.1f})"
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
