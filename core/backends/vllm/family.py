"""The model family a vLLM server serves for Framewise, named here and nowhere else in the backend.

Framewise samples the clip itself and lays out the chat messages, time markers and encoder budgets
as the served family expects, so the backend must know that family. It is read from the served
model's config.json where vLLM loaded it from a folder (or a hub id cached) on this machine, else
guessed from the model's name and where it came from (vLLM's ``/v1/models`` says no more): a name
that says Qwen3.5 is a Qwen3.5, anything else a Qwen3-VL, as before the server has said what it
serves. Both families' requests are laid out alike (Qwen3.5's tower and processor are Qwen3-VL's);
a Qwen3.5 is asked not to think (its family's ``chat_template_options``).
"""

from __future__ import annotations

import re

from framewise.core.errors import FramewiseError
from framewise.core.families import ModelFamily, family_for
from framewise.core.model_source import read_model_type, resolve_model_source

SERVED_MODEL_TYPE = "qwen3_vl"
# A served model whose name or source says this is a Qwen3.5 ("Qwen/Qwen3.5-9B", "qwen3_5-4b-fp8").
QWEN3_5_NAME = re.compile(r"qwen3[._-]?5(?![0-9])", re.IGNORECASE)


def served_family(name: str = "", source: str | None = None) -> ModelFamily:
    """The family of the model a vLLM server serves as ``name``, loaded from ``source`` (a folder
    or a hub id; ``None`` when the server does not say): the family of its config.json's
    ``model_type`` where that can be read here, else Qwen3.5 for a name or source that says so,
    else Qwen3-VL. Imported without torch."""
    if source:
        try:
            return family_for(read_model_type(resolve_model_source(source)))
        except FramewiseError:
            pass  # not on this machine, or not a family Framewise knows: go by the name
    if any(QWEN3_5_NAME.search(text) for text in (name, source or "")):
        return family_for("qwen3_5")
    return family_for(SERVED_MODEL_TYPE)
