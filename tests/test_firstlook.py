"""The first look: GPU readings painted before the TUI, from real recorded H100 NVML replies
(tests/data/nvml_h100.json); nothing is written once the app has the terminal, and a view that
never started gives the terminal back."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import struct
import termios
from pathlib import Path

from hostile import HOSTILE
from memtop.collectors.nvml_calls import ReplayNvml

from memtop.commands.firstlook import ENTER, LEAVE, FirstLook, lines

DATA = Path(__file__).parent / "data"


def _nv() -> ReplayNvml:
    return ReplayNvml.load(DATA / "nvml_h100.json")


def test_the_screen_is_the_real_readings_in_ascii_within_the_size():
    nv = _nv()
    info = nv.init()
    out = lines(_nv(), 60, 24)
    assert out[0].startswith(f"memtop  driver {info['driver']}  1 GPU")
    row = out[2]
    assert row.startswith("GPU 0  NVIDIA H100")
    _, total = nv.memory(0)
    assert f"{nv.power_mw(0) / 1000:.0f}W" in lines(_nv(), 200, 24)[2]
    assert f"/{total / 2**30:.1f}G" in lines(_nv(), 200, 24)[2]
    assert all(len(s) <= 60 and s.isascii() for s in out)
    assert len(lines(_nv(), 200, 2)) == 2  # no GPU row below the screen's last line


class _Named:
    """The recorded replies with the GPU's name replaced."""

    def __init__(self, name: str) -> None:
        self._inner, self._name = _nv(), name

    def __getattr__(self, attr: str):
        return getattr(self._inner, attr)

    def device(self, i: int) -> dict:
        return {**self._inner.device(i), "name": self._name}


def test_a_hostile_gpu_name_writes_no_control_sequence():
    for bad in HOSTILE:
        text = "".join(lines(_Named(bad), 200, 24))
        assert "\x1b" not in text and "\x07" not in text and text.isascii()


@contextlib.contextmanager
def _tty():
    """A real terminal for get_terminal_size (a pty): the stream to write and the master to read."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    stream = os.fdopen(slave, "w")
    try:
        yield stream, master
    finally:
        stream.close()
        os.close(master)


def _written_next(stream, master) -> bool:
    """Whether the next bytes on the terminal are a marker written now (nothing else came before)."""
    stream.write("end")
    stream.flush()
    return os.read(master, 65536).decode() == "end"


def test_paint_then_hand_over_writes_nothing_more_and_close_leaves_the_screen_only_if_needed():
    with _tty() as (stream, master):
        fl = FirstLook(stream)
        fl.paint(_nv())
        got = os.read(master, 65536).decode()
        assert got.startswith(ENTER) and "GPU 0  NVIDIA H100" in got
        fl.hand_over()
        fl.paint(_nv())
        fl.close()  # the app had the terminal: Textual leaves the alternate screen itself
        assert _written_next(stream, master)


def test_a_view_that_never_started_gives_the_terminal_back():
    with _tty() as (stream, master):
        fl = FirstLook(stream)
        fl.paint(_nv())
        os.read(master, 65536)
        fl.close()
        assert os.read(master, 65536).decode() == LEAVE
        fl.paint(_nv())  # a start-up thread late after the exit: nothing
        assert _written_next(stream, master)


def test_no_terminal_or_a_failed_reading_paints_nothing():
    buf = io.StringIO()  # no fileno: not a terminal
    fl = FirstLook(buf)
    fl.paint(_nv())
    assert buf.getvalue() == "" and not fl.painted
    fl.close()
    assert buf.getvalue() == ""
