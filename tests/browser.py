"""A real headless browser for the report tests, and a tiny PNG decoder for its pictures.

`screenshot(page, png)` renders an HTML file with Debian's chromium (installed by
scripts/setup.sh), run as root the only way it runs there: headless, no sandbox, no GPU,
no network services, a fresh profile directory. `decode_png` reads the PNG it writes
(8-bit RGB or RGBA, non-interlaced) with zlib and the five PNG row filters: no imaging
library needed.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

CHROMIUM: Optional[str] = shutil.which("chromium")


def screenshot(page: Path, png: Path, width: int = 1200, height: int = 1600) -> None:
    """Render `page` (a local file) to `png` at `width` x `height` CSS pixels."""
    assert CHROMIUM is not None, "chromium is not installed (scripts/setup.sh installs it)"
    with tempfile.TemporaryDirectory(prefix="lbtune-chromium-") as profile:
        argv = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
            f"--screenshot={png}", f"--window-size={width},{height}", page.resolve().as_uri(),
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0 or not png.is_file():
        raise AssertionError(f"chromium exit {proc.returncode}: {proc.stderr[-2000:]}")


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    rows: list[bytes]  # RGB, 3 bytes per pixel

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        r, g, b = self.rows[y][3 * x : 3 * x + 3]
        return (r, g, b)

    def count(self, rgb: tuple[int, int, int]) -> int:
        """Pixels of exactly this colour."""
        target = bytes(rgb)
        return sum(
            1 for row in self.rows for i in range(0, len(row), 3) if row[i : i + 3] == target
        )

    def colours(self) -> dict[tuple[int, int, int], int]:
        out: dict[tuple[int, int, int], int] = {}
        for row in self.rows:
            for i in range(0, len(row), 3):
                key = (row[i], row[i + 1], row[i + 2])
                out[key] = out.get(key, 0) + 1
        return out


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> Image:
    """Pixels of an 8-bit RGB/RGBA non-interlaced PNG (what chromium writes), as RGB."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            upleft = prev[i - bpp] if i >= bpp else 0
            add = (0, left, up, (left + up) // 2, _paeth(left, up, upleft))[ftype]
            line[i] = (line[i] + add) & 0xFF
        prev = line
        rgb = line if bpp == 3 else bytearray(b for i, b in enumerate(line) if i % 4 != 3)
        rows.append(bytes(rgb))
    return Image(width, height, rows)
