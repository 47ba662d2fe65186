"""Shrink a labelled recording for tests/data: command lines of watched processes cut to 60
characters (torch.compile's workers carry kilobyte-long ones), then VACUUM. Nothing the classifier
reads changes. Host blobs are chained (each deflated against the one before, every
HOST_KEY_EVERY-th standing alone): they are inflated with the store's own reader and deflated again
the same way. usage: python bench/workloads/trim.py IN.memtop OUT.memtop"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import zlib

from memtop.storage.decode import HOST_KEY_EVERY, inflate_host

src, dst = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dst)
db = sqlite3.connect(dst)
old_prev: bytes | None = None
new_prev: bytes | None = None
for n, (t, blob) in enumerate(db.execute("SELECT t, data FROM host ORDER BY t").fetchall()):
    raw = inflate_host(blob, old_prev)
    old_prev = raw
    d = json.loads(raw)
    for p in d["procs"]:
        p["cmdline"] = p["cmdline"][:60]
    new = json.dumps(d, separators=(",", ":")).encode()
    key = new_prev if n % HOST_KEY_EVERY and new_prev is not None else None
    z = zlib.compressobj(6, zdict=key) if key else zlib.compressobj(6)
    db.execute("UPDATE host SET data=? WHERE t=?", (z.compress(new) + z.flush(), t))
    new_prev = new
db.commit()
db.execute("VACUUM")
db.close()
