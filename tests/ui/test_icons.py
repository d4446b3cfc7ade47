"""Button icons drawn in the palette's button-text colour: visible on a dark palette, redrawn when it changes."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QPushButton, QStyle, QWidget

from framewise.ui.chat import ChatPanel
from framewise.ui.frames import ClipPreview
from framewise.ui.icons import glyph_icon

TEXT = QColor(236, 236, 236)
DISABLED_TEXT = QColor(120, 120, 120)


def dark_palette() -> QPalette:
    palette = QPalette()
    palette.setColor(QPalette.ColorRole.Button, QColor(40, 40, 40))
    palette.setColor(QPalette.ColorRole.ButtonText, TEXT)
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, DISABLED_TEXT)
    return palette


def opaque_colours(icon: QIcon, mode: QIcon.Mode = QIcon.Mode.Normal) -> set[int]:
    """The RGB of every fully opaque pixel of ``icon`` at 24 px."""
    image = icon.pixmap(24, 24, mode).toImage()
    pixels = (image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height()))
    return {colour.rgb() for colour in pixels if colour.alpha() == 255}


def test_a_glyph_icon_is_the_button_text_colour_enabled_and_disabled(qtbot):
    button = QPushButton("Stop")
    qtbot.addWidget(button)
    button.setPalette(dark_palette())
    icon = glyph_icon(button, QStyle.StandardPixmap.SP_MediaStop)
    assert opaque_colours(icon) == {TEXT.rgb()}
    assert opaque_colours(icon, QIcon.Mode.Disabled) == {DISABLED_TEXT.rgb()}


@pytest.mark.parametrize(
    ("make", "button"),
    [
        (ClipPreview, lambda widget: widget.play_button),
        (ChatPanel, lambda widget: widget.send_button),
        (ChatPanel, lambda widget: widget.stop_button),
    ],
)
def test_buttons_redraw_their_icons_when_the_palette_turns_dark(qtbot, make, button):
    widget: QWidget = make()
    qtbot.addWidget(widget)
    widget.setPalette(dark_palette())
    assert opaque_colours(button(widget).icon()) == {TEXT.rgb()}
