"""Strings a hostile recording or watched process may carry. Each must reach a terminal inert."""

ESC = "\x1b"
HOSTILE: tuple[str, ...] = (
    f"{ESC}]0;PWNED-TITLE{ESC}\\",  # OSC 0: window/pane title
    f"{ESC}]52;c;cHduZWQ={ESC}\\",  # OSC 52: clipboard write ("pwned")
    f"{ESC}]8;;file:///etc/passwd{ESC}\\link{ESC}]8;;{ESC}\\",  # OSC 8 hyperlink
    f"{ESC}[2J{ESC}[H",  # CSI clear screen, home
    f"{ESC}P+q544e{ESC}\\",  # DCS (XTGETTCAP)
    "\u202eevil\u202c",  # bidi override
    "nul\x00byte",
    "\x9b31mC1-CSI",  # C1 CSI
    "bad\udcffutf8",  # invalid UTF-8 decoded with surrogateescape
    "x" * 10_000,  # 10 KB line
    "[b]bold[/b][/bogus]",  # Textual/Rich markup
    '[link="file:///etc/passwd"]click[/link]',
    "del\x7fchar\ttab\nnewline\rcr",
)
