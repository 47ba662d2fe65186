"""Two exports of one recording hold the same trace: each decoded (the protobuf field by field, interned
names resolved; or the JSON), its events grouped per track (a track known by its descriptor's content,
not its uuid; the JSON's by pid, tid and counter name) in file order, and each track's events compared
(their order across tracks may differ). Exit 1 if a track differs.

--steps: a counter's value equal to the one before it on its track is left out of both first (Perfetto
draws a counter as steps: since export4 the protobuf writes no such repeat, so a trace of before holds
them and one of after does not; the steps drawn are what is compared).

usage: python bench/export_same.py [--steps] MAIN.pftrace BRANCH.pftrace   (or two .json[.gz])"""

import gzip
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path


def varint(b, i):
    """The varint at ``b[i]`` and the index after it."""
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def fields(b):
    i, n = 0, len(b)
    while i < n:
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i : i + 8]
            i += 8
        elif w == 2:
            size, i = varint(b, i)
            v = b[i : i + size]
            i += size
        elif w == 5:
            v = b[i : i + 4]
            i += 4
        else:
            raise ValueError(w)
        yield f, w, v


STEPS = "--steps" in sys.argv


def proto(path):
    data = Path(path).read_bytes()
    last = {}  # a counter track -> its last value (--steps)
    desc = {}
    iids = {}
    tracks = defaultdict(list)

    def tkey(u):
        d = desc[u]
        return (d[0], tkey(d[1]) if d[1] else None)

    for f, _w, pkt in fields(data):
        assert f == 1
        ts = None
        te = None
        for pf, _pw, pv in fields(pkt):
            if pf == 8:
                ts = pv
            elif pf == 60:
                u = parent = None
                rest = []
                for df, _dw, dv in fields(pv):
                    if df == 1:
                        u = dv
                    elif df == 5:
                        parent = dv
                    else:
                        rest.append((df, dv))
                desc[u] = (tuple(rest), parent)
            elif pf == 12:
                for idf, _idw, idv in fields(pv):
                    if idf == 2:
                        d = dict((a, b) for a, _, b in fields(idv))
                        iids[d[1]] = d[2]
            elif pf == 11:
                te = pv
        if te is None:
            continue
        ev = []
        uuid = None
        for ef, _ew, ev_ in fields(te):
            if ef == 11:
                uuid = ev_
            elif ef == 10:
                ev.append(("name", iids[ev_]))
            else:
                ev.append((ef, ev_))
        k = tkey(uuid)
        if STEPS and (9, 4) in ev:  # a counter (TrackEvent.type COUNTER)
            value = [v for f, v in ev if f in (44, 45)]  # double / int counter value
            if last.get(k) == value:
                continue
            last[k] = value
        tracks[k].append((ts, tuple(ev)))
    return tracks


def js(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
        d = json.load(fh)
    tracks = defaultdict(list)
    for e in d["traceEvents"]:
        k = (e.get("ph") == "M", e.get("pid"), e.get("tid"), e.get("name") if e.get("ph") == "C" else None)
        tracks[repr(k)].append(json.dumps(e, sort_keys=True))
    d["traceEvents"] = None
    tracks["rest"] = [json.dumps(d, sort_keys=True)]
    return tracks


def digest(path):
    t = js(path) if ".json" in path else proto(path)
    return {repr(k): hashlib.sha256(repr(v).encode()).hexdigest()[:16] + f" n={len(v)}" for k, v in t.items()}


paths = [a for a in sys.argv[1:] if a != "--steps"]
a, b = digest(paths[0]), digest(paths[1])
diff = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
print(
    f"tracks {len(a)} vs {len(b)}; events {sum(int(v.split('n=')[1]) for v in a.values())}; differing tracks: {len(diff)}"
)
for k in sorted(diff)[:10]:
    print(" ", k[:150], a.get(k), b.get(k))
sys.exit(1 if diff else 0)
