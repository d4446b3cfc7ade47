"""Framewise's composition root: GUI entry point, CLI, logging."""
