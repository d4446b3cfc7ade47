"""The model family a vLLM server serves for Framewise, named here and nowhere else in the backend.

Framewise samples the clip itself and lays out the chat messages, time markers and encoder budgets
as the served family expects, so the backend must know that family before the server answers. Today
a server for Framewise runs a Qwen3-VL checkpoint (the serve command the backend shows starts one).
This function is the place that support for another served family (Qwen3.5) extends: for example by
choosing the family from the served model's ``model_type``.
"""

from __future__ import annotations

from framewise.core.families import ModelFamily, family_for

SERVED_MODEL_TYPE = "qwen3_vl"


def served_family() -> ModelFamily:
    """The family of the checkpoints a vLLM server serves for Framewise (its frame sizing, chat
    layout, time markers and limits); imported without torch."""
    return family_for(SERVED_MODEL_TYPE)
