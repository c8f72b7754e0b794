#!/usr/bin/env python3
"""Draws Tether's app icons (server/src/pages/assets/icon-*.png, favicon.ico) with the
standard library only: a white tether knot (two linked rings) on the accent blue.
Run once after changing the mark; the files are committed."""
import math
import struct
import zlib
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "server/src/pages/assets"
BLUE = (37, 88, 184)
WHITE = (255, 255, 255)


def coverage(x, y, size, safe):
    """How much of pixel (x, y) the two rings cover, 0..1 (4x4 supersampled)."""
    inner = size * safe  # the mark lives inside this square, centred
    radius, width = inner * 0.26, inner * 0.085
    centres = [(size / 2 - inner * 0.14, size / 2), (size / 2 + inner * 0.14, size / 2)]
    hits = 0
    for sy in range(4):
        for sx in range(4):
            px, py = x + (sx + 0.5) / 4, y + (sy + 0.5) / 4
            if any(abs(math.hypot(px - cx, py - cy) - radius) < width / 2 for cx, cy in centres):
                hits += 1
    return hits / 16


def rounded(x, y, size, corner):
    """Whether (x, y) lies inside a square of `size` with rounded corners."""
    cx = min(max(x + 0.5, corner), size - corner)
    cy = min(max(y + 0.5, corner), size - corner)
    return math.hypot(x + 0.5 - cx, y + 0.5 - cy) <= corner


def draw(size, maskable):
    """RGBA rows: a full bleed square for maskable icons (the mark in the 80 % safe zone),
    else a rounded square."""
    rows = []
    for y in range(size):
        row = bytearray([0])
        for x in range(size):
            inside = maskable or rounded(x, y, size, size * 0.2)
            if not inside:
                row += bytes(4)
                continue
            a = coverage(x, y, size, 0.62 if maskable else 0.86)
            row += bytes(round(b * (1 - a) + w * a) for b, w in zip(BLUE, WHITE)) + b"\xff"
        rows.append(bytes(row))
    return b"".join(rows)


def png(size, maskable=False):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(draw(size, maskable), 9)) + chunk(b"IEND", b""))


def ico(image, size):
    """An .ico holding one PNG image (allowed since Windows Vista, read by every browser)."""
    entry = struct.pack("<BBBBHHII", size, size, 0, 0, 1, 32, len(image), 6 + 16)
    return struct.pack("<HHH", 0, 1, 1) + entry + image


if __name__ == "__main__":
    for name, size, maskable in [("icon-192.png", 192, False), ("icon-512.png", 512, False),
                                 ("icon-maskable-512.png", 512, True),
                                 ("apple-touch-icon.png", 180, True)]:
        (ASSETS / name).write_bytes(png(size, maskable))
    (ASSETS / "favicon.ico").write_bytes(ico(png(32), 32))
