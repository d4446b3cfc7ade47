"""Data files that ship with Framewise: the demo model, sample clips and icons (no code)."""
