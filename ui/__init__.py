"""Framewise's window: Qt widgets, the worker object that runs the engine on its thread, the
Qt-free window state (:mod:`.session`) and the keeper of past conversations
(:mod:`.conversation_keeper`). Never imports torch."""

from framewise.ui.qt_compat import guard_against_emit_refcount_bug

guard_against_emit_refcount_bug()
