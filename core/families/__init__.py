"""Model families: everything that knows one family of vision-language models lives in its own
package here (Qwen3-VL: :mod:`framewise.core.families.qwen3_vl`); the rest of core asks it through
:class:`~framewise.core.families.base.ModelFamily` and :class:`~framewise.core.families.base.FamilyLimits`.

:mod:`.base` holds that protocol, the limits and :class:`~framewise.core.families.base.VisionSpan`;
this module is the registry that maps a checkpoint's ``model_type`` to its family. A family's
module is imported when it is first asked for, and its tensor code when first used, so reading
:func:`default_limits` costs no heavy import and the vLLM backend runs without torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from framewise.core.errors import UnsupportedModelError
from framewise.core.families.base import ModelFamily
from framewise.core.families.qwen3_vl.limits import MODEL_TYPES as _QWEN3_VL_TYPES
from framewise.core.families.qwen3_vl.limits import QWEN3_VL_LIMITS
from framewise.core.seam import FamilyLimits

__all__ = [
    "ModelFamily",
    "default_family", "default_limits", "family_for", "register", "supported_model_types", "unregister",
]
# The family of the bundled demo model; also the one a vLLM server serves for Framewise.
_DEFAULT_MODEL_TYPE = _QWEN3_VL_TYPES[0]

FamilyFactory = Callable[[], ModelFamily]


def _module_family(module: str) -> FamilyFactory:
    """A factory that imports ``module`` when first asked and returns its ``FAMILY``."""
    return lambda: importlib.import_module(module).FAMILY


_REGISTRY: dict[str, FamilyFactory] = {
    model_type: _module_family("framewise.core.families.qwen3_vl.family") for model_type in _QWEN3_VL_TYPES
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


def default_family() -> ModelFamily:
    """The bundled demo model's family, which is also the one a vLLM server serves for Framewise."""
    return family_for(_DEFAULT_MODEL_TYPE)


def default_limits() -> FamilyLimits:
    """The limits settings are checked against before a model is loaded: :func:`default_family`'s
    (read without importing it)."""
    return QWEN3_VL_LIMITS
