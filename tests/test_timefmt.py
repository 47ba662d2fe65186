import pytest

from memtop.core.timefmt import clock, parse_clock


@pytest.mark.parametrize(
    "s,text",
    [
        (0, "0:00:00"),
        (59.9, "0:00:59"),
        (61, "0:01:01"),
        (3723, "1:02:03"),
        (29059, "8:04:19"),
        (-3, "0:00:00"),
    ],
)
def test_clock(s, text):
    assert clock(s) == text


def test_clock_non_finite():
    assert clock(float("nan")) == clock(float("inf")) == "0:00:00"


@pytest.mark.parametrize(
    "text,s",
    [
        ("1:02:03", 3723),
        ("2:03", 123),
        ("62m", 3720),
        ("1h2m3s", 3723),
        ("90s", 90),
        ("3723", 3723),
        (" 1.5h ", 5400),
        ("0:00:07.5", 7.5),
    ],
)
def test_parse_clock(text, s):
    assert parse_clock(text) == s


@pytest.mark.parametrize("text", ["", "abc", "1:60", "1:2:3:4", "5x", "1m1m", "-5", "nan", "inf", "1e9"])
def test_parse_clock_rejects(text):
    with pytest.raises(ValueError):
        parse_clock(text)


def test_round_trip():
    for s in (0, 1, 59, 3599, 3600, 86399, 100000):
        assert parse_clock(clock(s)) == s


def test_length_reads_as_seconds_then_as_a_clock():
    from memtop.core.timefmt import length

    assert length(42.4) == "42 s"
    assert length(8.25, 1) == "8.2 s"
    assert length(119.4) == "119 s"
    assert length(120) == "0:02:00"
    assert length(28764.2) == "7:59:24"
    assert length(0.5) == "0.5 s" and length(0) == "0 s"  # a first bin is not "the last 0 s"
