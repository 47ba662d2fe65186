"""Shrink a labelled recording for tests/data: command lines of watched processes cut to 60
characters (torch.compile's workers carry kilobyte-long ones), then VACUUM. Nothing the classifier
reads changes. usage: python bench/workloads/trim.py IN.memtop OUT.memtop"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import zlib

src, dst = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dst)
db = sqlite3.connect(dst)
for t, blob in db.execute("SELECT t, data FROM host").fetchall():
    d = json.loads(zlib.decompress(blob))
    for p in d["procs"]:
        p["cmdline"] = p["cmdline"][:60]
    db.execute(
        "UPDATE host SET data=? WHERE t=?",
        (zlib.compress(json.dumps(d, separators=(",", ":")).encode(), 9), t),
    )
db.commit()
db.execute("VACUUM")
db.close()
