"""Framewise's core: everything that is not Qt. Importable and testable headless."""

__version__ = "0.1.0"
