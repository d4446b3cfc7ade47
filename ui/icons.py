"""Monochrome button icons drawn in the palette's button-text colour.

The style's media and arrow icons are dark glyphs whatever the colour scheme, so on a dark palette a
play or stop button shows no symbol. :func:`glyph_icon` redraws such an icon as a silhouette in the
button-text colour of the widget that holds the button (and its disabled colour for a disabled
button); that widget calls it again on its own palette change, which Qt delivers before the
buttons inside it take the new palette.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QStyle, QWidget

# Sizes to draw a scalable icon at, where the style lists none.
FALLBACK_SIZES = (16, 24, 32, 48)


def glyph_icon(widget: QWidget, kind: QStyle.StandardPixmap) -> QIcon:
    """The style's ``kind`` icon as a silhouette in ``widget``'s button-text colour, enabled and disabled."""
    source = widget.style().standardIcon(kind)
    sizes = source.availableSizes() or [QSize(side, side) for side in FALLBACK_SIZES]
    palette = widget.palette()
    icon = QIcon()
    modes = ((QIcon.Mode.Normal, QPalette.ColorGroup.Active), (QIcon.Mode.Disabled, QPalette.ColorGroup.Disabled))
    for mode, group in modes:
        color = palette.color(group, QPalette.ColorRole.ButtonText)
        for size in sizes:
            icon.addPixmap(tinted(source.pixmap(size), color), mode)
    return icon


def tinted(pixmap: QPixmap, color: QColor) -> QPixmap:
    """``pixmap``'s shape (its alpha) filled with ``color``."""
    result = QPixmap(pixmap.size())
    result.setDevicePixelRatio(pixmap.devicePixelRatio())
    result.fill(Qt.GlobalColor.transparent)
    painter = QPainter(result)
    painter.drawPixmap(0, 0, pixmap)
    painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceIn)
    painter.fillRect(result.rect(), color)
    painter.end()
    return result
