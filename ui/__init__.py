"""Framewise's Qt widgets and the worker object. Never imports torch."""
