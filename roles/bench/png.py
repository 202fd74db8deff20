"""A dependency-free PNG line chart: tokens/s against concurrency, one line per instance.

Written here rather than with matplotlib: a plot of a few lines needs ~100 lines of zlib and struct, while
matplotlib would add numpy's C extensions' company (pillow, fonttools, kiwisolver, contourpy, ~40 MB) to a
provisioning toolkit's environment for one picture. Tick labels are drawn with a 3x5 digit font; the axis names and
the legend (colour per instance) are in the Markdown report beside the image.
"""

from __future__ import annotations

import struct
import zlib

#: Line colours (RGB) in instance order; the report names them.
COLOURS = (("blue", (31, 119, 180)), ("orange", (255, 127, 14)), ("green", (44, 160, 44)), ("red", (214, 39, 40)),
           ("purple", (148, 103, 189)), ("brown", (140, 86, 75)), ("pink", (227, 119, 194)), ("grey", (127, 127, 127)))

_DIGITS = {  # 3x5 glyphs, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
}


class Canvas:
    """An RGB raster, white, (0, 0) top left."""

    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, rgb: tuple[int, int, int], r: int = 0) -> None:
        for yy in range(y - r, y + r + 1):
            for xx in range(x - r, x + r + 1):
                if 0 <= xx < self.w and 0 <= yy < self.h:
                    i = (yy * self.w + xx) * 3
                    self.px[i:i + 3] = bytes(rgb)

    def line(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int], r: int = 0) -> None:
        """Bresenham's line, `r` pixels either side."""
        dx, dy, sx, sy = abs(x1 - x0), -abs(y1 - y0), 1 if x0 < x1 else -1, 1 if y0 < y1 else -1
        err = dx + dy
        while True:
            self.dot(x0, y0, rgb, r)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err, x0 = err + dy, x0 + sx
            if e2 <= dx:
                err, y0 = err + dx, y0 + sy

    def text(self, x: int, y: int, s: str, rgb: tuple[int, int, int] = (0, 0, 0), scale: int = 2) -> None:
        """Digits, '.' and '-' with their top left at (x, y); other characters leave a gap."""
        for ch in s:
            glyph = _DIGITS.get(ch)
            for i, bit in enumerate(glyph or ""):
                if bit == "1":
                    for dy in range(scale):
                        for dx in range(scale):
                            self.dot(x + (i % 3) * scale + dx, y + (i // 3) * scale + dy, rgb)
            x += 4 * scale

    def png(self) -> bytes:
        """The PNG file: 8-bit RGB, no interlace, filter 0 on every row."""
        rows = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def _nice(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def tps_chart(series: list[tuple[str, list[tuple[int, float]]]], width: int = 640, height: int = 400) -> bytes:
    """PNG of aggregate tokens/s (y, from 0) against concurrency (x, the levels measured), one line per
    (name, [(concurrency, tokens/s), ...]) in COLOURS order."""
    c = Canvas(width, height)
    left, right, top, bottom = 60, width - 20, 20, height - 40
    xs = sorted({x for _, pts in series for x, _ in pts}) or [1]
    ymax = max([y for _, pts in series for _, y in pts] + [1e-9]) * 1.1
    grey, black = (220, 220, 220), (0, 0, 0)

    def px(x: int) -> int:
        i = xs.index(x)
        return left + (right - left) * i // max(1, len(xs) - 1) if len(xs) > 1 else (left + right) // 2

    def py(y: float) -> int:
        return bottom - round((bottom - top) * y / ymax)

    for k in range(5):  # horizontal grid lines with their tokens/s
        y = ymax * k / 4
        c.line(left, py(y), right, py(y), grey)
        c.text(4, py(y) - 5, _nice(y))
    for x in xs:
        c.line(px(x), top, px(x), bottom, grey)
        c.text(px(x) - 4 * len(str(x)), bottom + 10, str(x))
    c.line(left, bottom, right, bottom, black)
    c.line(left, top, left, bottom, black)
    for n, (_, pts) in enumerate(series):
        rgb = COLOURS[n % len(COLOURS)][1]
        pts = sorted(pts)
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            c.line(px(x0), py(y0), px(x1), py(y1), rgb, r=1)
        for x, y in pts:
            c.dot(px(x), py(y), rgb, r=3)
    return c.png()
