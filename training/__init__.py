"""Tools that make data for Framewise: clip writing, synthetic scenes, demo-model training."""
