"""Colour-vision-deficiency simulation, for the palette test (tests/test_tui_view.py) and for anyone
tuning the phase colours (tui/palette.py): moved out of the wheel, which never used it."""

from __future__ import annotations

from rich.color import Color

# Machado, Oliveira & Fernandes (2009), severity 1.0, applied to linear RGB
_CVD = {
    "deuteranopia": (
        (0.367322, 0.860646, -0.227968),
        (0.280085, 0.672501, 0.047413),
        (-0.011820, 0.042940, 0.968881),
    ),
    "protanopia": (
        (0.152286, 1.052583, -0.204868),
        (0.114503, 0.786281, 0.099216),
        (-0.003882, -0.048116, 1.051998),
    ),
}


def _lin(c: float) -> float:
    c /= 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    r, g, b = rgb
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def simulated_lab(color: str, deficiency: str | None = None) -> tuple[float, float, float]:
    """CIELAB of a colour as seen with `deficiency` (None: normal vision)."""
    rgb = [_lin(c) for c in Color.parse(color).get_truecolor()]
    if deficiency is not None:
        m = _CVD[deficiency]
        rgb = [min(1.0, max(0.0, sum(m[i][j] * rgb[j] for j in range(3)))) for i in range(3)]
    return _lab((rgb[0], rgb[1], rgb[2]))


def delta_e(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """CIE76 colour difference."""
    return sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
