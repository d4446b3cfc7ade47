"""Framewise's Qt widgets and the worker object. Never imports torch."""

from framewise.ui.qt_compat import guard_against_emit_refcount_bug

guard_against_emit_refcount_bug()
