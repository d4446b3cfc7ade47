"""A still picture in the preview: no timeline, no play button; a clip after it gets them back."""

from __future__ import annotations

import numpy as np

from framewise.core.events import ClipSampled
from framewise.ui.frames import ClipPreview
from framewise.ui.clip_files import VIDEO_FILTER


def test_a_picture_hides_the_timeline_and_a_clip_shows_it_again(qtbot) -> None:
    preview = ClipPreview()
    qtbot.addWidget(preview)
    preview.show()
    picture = ClipSampled("red.png", "", (0.0,), (np.zeros((32, 48, 3), np.uint8),), 48, 32, 0.0, kind="image")
    preview.set_clip(picture)
    assert not preview.timeline.isVisible() and not preview.play_button.isVisible()
    assert preview.view.image is not None
    frames = tuple(np.zeros((32, 48, 3), np.uint8) for _ in range(2))
    preview.set_clip(ClipSampled("c.mp4", "", (0.0, 0.5), frames, 48, 32, 1.0))
    assert preview.timeline.isVisible() and preview.play_button.isVisible()


def test_the_open_dialog_offers_pictures() -> None:
    for pattern in ("*.png", "*.jpg", "*.jpeg", "*.webp", "*.mp4"):
        assert pattern in VIDEO_FILTER.split(";;")[0]
