"""Framewise's core: everything that is not Qt. Importable and testable headless."""
