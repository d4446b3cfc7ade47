"""Framewise: ask questions about video clips; Qwen3-VL answers.

The subpackages live in the repository's top-level folders and install under this name:
``framewise.core`` (``core/``, no Qt), ``framewise.ui`` (``ui/``, no torch), ``framewise.app``
(``app/``, the entry points) and ``framewise.assets`` (``assets/``, data only).
"""

__version__ = "0.1.0"
