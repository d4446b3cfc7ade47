"""Model families: everything that knows one family of vision-language models lives in its own
package here (Qwen3-VL: :mod:`framewise.core.families.qwen3_vl`); the rest of core asks it through
:class:`~framewise.core.families.base.ModelFamily` and the plain values of :mod:`framewise.core.seam`.

This module is the registry that maps a checkpoint's ``model_type`` to its family: one line per
built-in family, naming the module whose ``FAMILY`` it is and the model types it loads. A family's
module is imported when it is first asked for, and its tensor code when first used, so the
registry costs no heavy import and the vLLM backend runs without torch.

A family package may import another family's modules only where it reuses that family's piece
whole (as transformers' modular files reuse a sibling's), and it names each such family in its
``REUSES`` tuple; reuse runs one way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from framewise.core.errors import UnsupportedModelError
from framewise.core.families.base import ModelFamily

__all__ = ["ModelFamily", "family_for", "register", "supported_model_types", "unregister"]

FamilyFactory = Callable[[], ModelFamily]

# The module whose FAMILY loads checkpoints of these model types.
BUILT_IN_FAMILIES = {
    "framewise.core.families.qwen3_vl.family": ("qwen3_vl", "qwen3_vl_moe"),
    "framewise.core.families.qwen3_5.family": ("qwen3_5",),
}


def _module_family(module: str) -> FamilyFactory:
    """A factory that imports ``module`` when first asked and returns its ``FAMILY``."""
    return lambda: importlib.import_module(module).FAMILY


_REGISTRY: dict[str, FamilyFactory] = {
    model_type: _module_family(module) for module, model_types in BUILT_IN_FAMILIES.items() for model_type in model_types
}


def register(model_type: str, factory: FamilyFactory) -> None:
    """Make checkpoints of ``model_type`` load through the family ``factory()`` returns."""
    _REGISTRY[model_type] = factory


def unregister(model_type: str) -> None:
    """Forget ``model_type`` (a family registered for a while, as tests do)."""
    _REGISTRY.pop(model_type, None)


def supported_model_types() -> tuple[str, ...]:
    """Every ``model_type`` some registered family loads, in registration order."""
    return tuple(_REGISTRY)


def family_for(model_type: str | None) -> ModelFamily:
    """The family that loads checkpoints of ``model_type``.

    Raises UnsupportedModelError naming the supported model types for any other.
    """
    factory = _REGISTRY.get(model_type or "")
    if factory is None:
        raise UnsupportedModelError(
            f"Framewise knows no model family of model_type {model_type or '(none given)'!r}; it runs "
            f"checkpoints of model_type {' or '.join(supported_model_types())}. Choose such a checkpoint."
        )
    return factory()
