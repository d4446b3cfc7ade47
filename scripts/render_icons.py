"""Render assets/icons/framewise.svg to the PNG sizes a desktop needs.

Run from the repository root with the project's Python:

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/render_icons.py

Writes assets/icons/framewise-<size>.png for every size in ICON_SIZES, square, RGBA,
transparent outside the drawing. The SVG is the source of truth; the PNGs are committed
so that installing the launcher needs no renderer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICONS_DIR = Path(__file__).resolve().parents[1] / "assets" / "icons"
SVG_NAME = "framewise.svg"


def png_name(size: int) -> str:
    return f"framewise-{size}.png"


def render_png(renderer: QSvgRenderer, size: int, destination: Path) -> None:
    """Draw the whole SVG into a size×size transparent ARGB image and save it as PNG."""
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    if not image.save(str(destination), "PNG"):
        raise OSError(f"could not write {destination}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ICONS_DIR, help="folder for the PNGs (default: assets/icons)")
    args = parser.parse_args(argv)

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ICONS_DIR / SVG_NAME))
    if not renderer.isValid():
        print(f"error: {ICONS_DIR / SVG_NAME} is not a valid SVG", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for size in ICON_SIZES:
        destination = args.out / png_name(size)
        render_png(renderer, size, destination)
        print(destination)
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
