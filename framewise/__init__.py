"""Framewise: ask questions about video clips; Qwen3-VL and Qwen3.5 answer.

The subpackages live in the repository's top-level folders and install under this name:
``framewise.core`` (``core/``, no Qt), ``framewise.ui`` (``ui/``, no torch), ``framewise.app``
(``app/``, the entry points) and ``framewise.assets`` (``assets/``, data only).

Importing the package lets torch's CUDA allocator grow its segments in place
(``expandable_segments``) unless a person configured the allocator themselves: a chunked prefill
of a long clip allocates transients a little larger at every chunk, which fixed-size segments
cannot reuse, so the memory held from the card grew with the clip's length (docs/benchmarks.md,
"Long clips on a GPU"). The setting is read when CUDA first allocates, so it must be set before.
"""

import os as _os

__version__ = "0.1.0"

ALLOCATOR_SETTING = "expandable_segments:True"

if not (_os.environ.get("PYTORCH_ALLOC_CONF") or _os.environ.get("PYTORCH_CUDA_ALLOC_CONF")):
    _os.environ["PYTORCH_ALLOC_CONF"] = ALLOCATOR_SETTING
