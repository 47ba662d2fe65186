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


def _text(s: str) -> bytes:
    """A str as the bytes SQLite should hold (a lone surrogate is the invalid UTF-8 byte it came from)."""
    return s.encode("utf-8", "surrogateescape")


def _json(v: object) -> bytes:
    import json

    return _text(json.dumps(v, ensure_ascii=False))


def hostile_recording(src, dst, s: str):
    """Copy the real recording `src` to `dst` with every string it holds set to `s`: the host name,
    GPU names and UUIDs, processes' names, users, command lines and argv, stack functions, files and
    source lines, thread names, capability details, marker labels and names, notes, perf event names,
    the recorded command. Returns `dst` (a pathlib.Path)."""
    import json
    import shutil
    import sqlite3
    import zlib
    from pathlib import Path

    from memtop.storage.decode import inflate_host
    from memtop.storage.store import Recording

    dst = Path(dst)
    shutil.copyfile(src, dst)
    db = sqlite3.connect(dst)
    T = "CAST(? AS TEXT)"  # bytes bound as TEXT keep invalid UTF-8 as it would arrive from a process
    meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
    meta["host"] = s
    meta["command"] = ["memtop", s]
    meta["gpus"] = [{**g, "name": s, "uuid": s, "pci_bus_id": s} for g in meta.get("gpus") or []]
    for k in ("host", "command", "gpus"):
        db.execute(f"UPDATE meta SET value={T} WHERE key=?", (_json(meta[k]), k))
    db.execute(f"UPDATE gpu_state SET uuid={T}, name={T}", (_text(s), _text(s)))
    prev = None
    for t, blob in db.execute("SELECT t, data FROM host ORDER BY t").fetchall():
        prev = inflate_host(blob, prev)  # (from schema 2 chained: each written back alone)
        d = json.loads(prev)
        d["procs"] = [{**p, "name": s, "cmdline": s, "user": s, "argv": [s, s]} for p in d["procs"]]
        db.execute("UPDATE host SET data=? WHERE t=?", (zlib.compress(_json(d)), t))
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='block'").fetchone():
        db.execute("DELETE FROM block")  # (copies of the rows, with the old strings: read the rows)
    rec = Recording(dst)  # (schema 4 stacks inflate against their bases: read them as memtop does)
    stacks = {sid: rec._frames_of(sid) for (sid,) in db.execute("SELECT id FROM stack")}
    rec.close()
    base = ", base=NULL" if "base" in {r[1] for r in db.execute("PRAGMA table_info(stack)")} else ""
    for sid, frames in stacks.items():
        fr = [[s, s, f.line, s] for f in frames]
        fr.append([s, s, 100_000 + sid, s])  # the table keeps each stack once: keep them distinct
        db.execute(f"UPDATE stack SET frames={T}{base} WHERE id=?", (_json(fr), sid))
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='thread_name'").fetchone():
        db.execute(f"UPDATE thread_name SET text={T}", (_text(s),))  # (schema 4: names by id)
    else:
        db.execute(f"UPDATE stack_sample SET name={T}", (_text(s),))
    db.execute(
        f"UPDATE caps SET data={T}",
        (_json([["perf", s, "unavailable", s, s], ["numa", s, "error", s, s]]),),
    )
    db.execute(f"UPDATE marker SET label={T}, name={T}", (_text(s), _text(s)))
    db.execute(f"INSERT INTO note SELECT min(t), {T} FROM frame", (_text(s),))
    for rowid, data in db.execute("SELECT rowid, data FROM perf").fetchall():
        db.execute(
            f"UPDATE perf SET data={T} WHERE rowid=?", (_json([[s, v] for _k, v in json.loads(data)]), rowid)
        )
    db.commit()
    db.close()
    return dst
