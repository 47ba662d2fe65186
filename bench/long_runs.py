"""Hours-long recordings: export time / peak RSS / size, report time (and equality with one serial pass),
size per GPU-hour, seek time. The recordings are built from the real 142 s labelled H100 run.

The tile is the real run re-written through this version's Writer (so its encoding is what is measured);
the hour and the 8 hours repeat that tile with shifted timestamps at the SQL level (writing 8 hours of
Frames through the Writer would take most of an hour here).

usage: nice python bench/long_runs.py [--hours 1,8] [--dir DIR] [--json OUT.json]
       python bench/long_runs.py --only-sizes   (each real recording written for an hour: MB/GPU-h)
       nice -n -5 python bench/long_runs.py --only-report --report-before <checkout> --runs 3
         (cold reports only, this tree and the checkout alternated on the same files)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memtop.core.timefmt import clock

ROOT = Path(__file__).parent.parent
SRC = ROOT / "tests/data/labelled_s2.memtop"
REAL = sorted((ROOT / "tests/data").glob("labelled_s*.memtop"))
# every real recording: written for an hour through the Writer, as `memtop record` would write it
WRITTEN = sorted((ROOT / "tests/data").glob("*.memtop")) + sorted(
    (ROOT / "tests/data/multi").glob("*.memtop")
)
# tables whose rows repeat per tile, and their time columns
TIMED = {
    "frame": ("t",),
    "gpu": ("t",),
    "gpu_state": ("t",),  # (each tile repeats the job's start and end: the report's worst case)
    "series": ("t",),
    "host": ("t",),
    "host_load": ("t",),  # (recordings from 2026-11-24 only)
    "host_proc": ("t",),
    "stack_sample": ("t",),
    "perf": ("t",),
    "note": ("t",),
    "marker": ("t0", "t1"),
}


def rewrite(src: Path, out: Path, seconds: float | None = None) -> None:
    """The real recording, read as Frames and written again through this version's Writer (with
    ``seconds``, repeated with shifted times until it covers them), as `memtop record` fills a file."""
    from store_bench import shifted

    from memtop.storage.store import Recording, Writer

    rec = Recording(src)
    frames = list(rec.frames())
    span = rec.duration + 0.1
    w = Writer(out, rec.meta, force=True)
    for k in range(max(1, round(seconds / span)) if seconds else 1):
        for f in shifted(frames, k * span):
            w.add(f)
            while w._q.qsize() > 5000:
                time.sleep(0.001)
    w.add_markers(rec.markers())
    w.close()
    rec.close()


def writer_hour(src: Path, out: Path, seconds: float = 3600.0) -> dict:
    """MB per GPU-hour of the real recording ``src`` written for ``seconds`` (``rewrite``); its largest
    tables."""
    rewrite(src, out, seconds)
    tables = sorted(by_table(out).items(), key=lambda kv: -kv[1])[:6]
    scale = size_per_gpu_hour(out) / os.path.getsize(out)
    return {
        "mb_per_gpu_hour": round(size_per_gpu_hour(out), 2),
        "largest_mb_per_gpu_hour": {k: round(v * scale, 2) for k, v in tables},
    }


def _writer_hour(args: tuple[Path, Path]) -> tuple[str, dict]:
    src, d = args
    out = d / f"wh_{src.parent.name}_{src.name}"
    got = writer_hour(src, out)
    out.unlink()
    return f"{src.parent.name}/{src.name}" if src.parent.name == "multi" else src.name, got


def tile(tile_path: Path, out: Path, seconds: float) -> None:
    """Repeat the tile with shifted timestamps until it covers ``seconds``."""
    if out.exists():
        out.unlink()
    out.write_bytes(tile_path.read_bytes())
    db = sqlite3.connect(out)
    t0, t1 = db.execute("SELECT min(t), max(t) FROM frame").fetchone()
    span = t1 - t0 + 0.1
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("ATTACH ? AS src", (str(tile_path),))
    cols = {tbl: [r[1] for r in db.execute(f"PRAGMA src.table_info({tbl})")] for tbl in TIMED}
    cols = {tbl: c for tbl, c in cols.items() if c}  # a tile from before a table has none
    k = 1
    while k * span < seconds - span / 2:
        dt = k * span
        for tbl, tcols in TIMED.items():
            if tbl not in cols:
                continue
            sel = ", ".join(f"{c} + {dt!r}" if c in tcols else c for c in cols[tbl])
            db.execute(f"INSERT INTO main.{tbl} SELECT {sel} FROM src.{tbl}")
        k += 1
    db.commit()
    db.execute("DETACH src")
    reblock(db)
    db.close()


def named_stack_sql(db: sqlite3.Connection) -> str:
    """stack_sample's rows as its column blocks hold them (thread names as text, any schema), in
    their order: for checks of the blocks and for tools that rebuild them."""
    name = "name"
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='thread_name'").fetchone():
        name = "coalesce((SELECT text FROM thread_name n WHERE n.id = stack_sample.name), name)"
    return f"SELECT t, pid, tid, {name}, active, gil, stack, error FROM stack_sample ORDER BY t, pid, i"


def host_figure_rows(db: sqlite3.Connection, cpu: bool = False) -> tuple[list[tuple], list[tuple]]:
    """The ``host`` and ``host_proc`` streams' rows of a recording's host table, in time order, as the
    Writer gives them to its blocks (``cpu``: as in WRITTEN_STREAMS; ``reblock`` re-blocks tiled rows with
    them; tests/test_colblock.py checks blocks against them)."""
    from memtop.storage.decode import inflate_host
    from memtop.storage.store import host_figures

    load: list[tuple] = []
    procs: list[tuple] = []
    prev = None
    for t, blob in db.execute("SELECT t, data FROM host ORDER BY t"):
        prev = inflate_host(blob, prev)
        row, rows = host_figures(t, prev, cpu)
        load.append(row)
        procs += rows
    return load, procs


def reblock(db: sqlite3.Connection) -> None:
    """The column blocks of the tiled rows, as the Writer would have written them (a copy of the
    tile's blocks would overlap): every stream's rows in time order through its BlockWriter."""
    import heapq

    from memtop.storage.colblock import BlockWriter
    from memtop.storage.decode import GPU_COLS
    from memtop.storage.store import GPU_MODES, WRITTEN_STREAMS

    if not db.execute("SELECT count(*) FROM sqlite_master WHERE name='block'").fetchone()[0]:
        return  # (the previous version's files have none)
    db.execute("DELETE FROM block")
    mode = "CASE mode " + " ".join(f"WHEN '{m}' THEN {i}" for i, m in enumerate(GPU_MODES)) + " END"
    have = {r[1] for r in db.execute("PRAGMA table_info(gpu)")}  # a tile from before a metric lacks it
    gpu_cols = ", ".join(c if c in have else "NULL" for c, _ in GPU_COLS)
    queries = {
        "frame": "SELECT t FROM frame ORDER BY t",
        "gpu": f"SELECT t, gpu, {mode}, {gpu_cols} FROM gpu ORDER BY t, gpu",
        "stack": named_stack_sql(db),
        "perf": "SELECT t, pid, json_array_length(data) FROM perf ORDER BY t, rowid",
        "perf_rate": "SELECT p.t, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM perf p, json_each(p.data) j"
        " ORDER BY p.t, p.rowid, j.key",
    }
    rows = {s: db.execute(q).fetchall() for s, q in queries.items()}
    rows["host"], rows["host_proc"] = host_figure_rows(db, cpu=True)
    streams = [[(r[0], k, s, r) for k, r in enumerate(got)] for s, got in rows.items()]
    w = BlockWriter(db, WRITTEN_STREAMS)
    for t, _, stream, row in heapq.merge(*streams):
        w.turn(t)
        w.add(stream, row)
    w.close()
    db.commit()


def measure_one(kind: str, args: list[str], env: dict | None = None, stdout: Path | None = None) -> dict:
    """One CLI run in a fresh child process (so ru_maxrss is its own); ``env``: e.g. another PYTHONPATH;
    ``stdout``: where the command's output goes (else it is dropped)."""
    code = (
        "import json,sys,resource,subprocess,time\n"
        "a=time.perf_counter()\n"
        "p=subprocess.run([sys.executable,'-m','memtop',*sys.argv[2:]],capture_output=True)\n"
        "w=time.perf_counter()-a\n"
        "sys.argv[1] and open(sys.argv[1],'wb').write(p.stdout)\n"
        "u=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "r,c=u.ru_maxrss,u.ru_utime+u.ru_stime\n"
        "print(json.dumps({'rc':p.returncode,'s':round(w,2),'cpu_s':round(c,2),'peak_rss_mib':round(r/1024,1),"
        "'err':p.stderr.decode()[-300:]}))\n"
    )
    # run from a neutral directory: `python -m` puts the working directory first on sys.path, which
    # in a checkout would shadow another tree's PYTHONPATH
    out = subprocess.run(
        [sys.executable, "-c", code, str(stdout or ""), *args],
        capture_output=True,
        check=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    d = json.loads(out.stdout)
    if d.pop("rc"):
        raise SystemExit(f"memtop {kind} failed: {d['err']}")
    d.pop("err")
    return d


def report_times(path: Path, runs: int, before: Path | None) -> dict:
    """Cold `memtop report` (a fresh process each) ``runs`` times; with ``before``, that checkout's
    report on the same file too, the two alternated so both see the same machine load; their JSON
    outputs are compared byte for byte."""
    args = ["report", str(path), "--format", "json"]
    trees = {"report_cold": None} | ({"report_cold_before": before} if before else {})
    times: dict[str, list[tuple[float, float, float]]] = {k: [] for k in trees}
    outs = {k: path.with_suffix(f".{k}.json") for k in trees}
    loads = []  # the 1-minute load average before each run (the VM is shared)
    for _ in range(runs):
        for key, tree in trees.items():
            env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
            loads.append(round(os.getloadavg()[0], 2))
            m = measure_one("report", args, env, outs[key])
            times[key].append((m["s"], m["cpu_s"], m["peak_rss_mib"]))
    res: dict = {
        k: {
            "min_s": min(s for s, _, _ in v),
            "median_s": round(statistics.median(s for s, _, _ in v), 2),
            "cpu_min_s": min(c for _, c, _ in v),
            "cpu_median_s": round(statistics.median(c for _, c, _ in v), 2),
            "peak_rss_mib_max": max(r for _, _, r in v),  # the largest of the report process and its workers
            "runs": v,
        }
        for k, v in times.items()
    }
    res["loadavg_1m_before_runs"] = loads
    if before:
        res["report_same_bytes_as_before"] = (
            outs["report_cold"].read_bytes() == outs["report_cold_before"].read_bytes()
        )
    return res


def size_per_gpu_hour(path: Path) -> float:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t0, t1 = db.execute("SELECT min(t), max(t) FROM frame").fetchone()
    gpus = max(1, len(json.loads(db.execute("SELECT value FROM meta WHERE key='gpus'").fetchone()[0]) or []))
    db.close()
    return os.path.getsize(path) / 1e6 / ((t1 - t0) / 3600) / gpus


def by_table(path: Path) -> dict:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.Error:
        rows = []
    db.close()
    return {n: s for n, s in rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", default="1,8")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--skip-serial", action="store_true", help="do not time the serial report pass")
    ap.add_argument(
        "--before", type=Path, help="a checkout of the previous version: its export/report side by side"
    )
    ap.add_argument(
        "--before-hours", type=float, default=1.0, help="only for recordings this long or shorter"
    )
    ap.add_argument("--only-report", action="store_true", help="cold report times only (no export, seek)")
    ap.add_argument(
        "--report-before",
        type=Path,
        help="a checkout that reads this version's recordings: its cold report on the same file, alternated",
    )
    ap.add_argument("--runs", type=int, default=1, help="cold report runs per tree (min and median kept)")
    ap.add_argument(
        "--sources",
        default=SRC.name,
        help="recordings under tests/data to tile, comma-separated (e.g. "
        "labelled_s2.memtop,heldout2_torch_s21.memtop,multi/heldout_ddp_s11.memtop)",
    )
    ap.add_argument("--no-sizes", action="store_true", help="skip the sizes of the real recordings")
    ap.add_argument(
        "--only-sizes",
        action="store_true",
        help="MB per GPU-hour of every real recording written for an hour",
    )
    a = ap.parse_args()
    d = (a.dir or Path(tempfile.mkdtemp(prefix="memtop-long-"))).resolve()
    d.mkdir(parents=True, exist_ok=True)
    res: dict = {"machine": "2-core VM", "date": time.strftime("%Y-%m-%d"), "source": SRC.name}

    # size per GPU-hour of each real recording, re-written through this Writer
    sizes = {}
    for p in [] if a.only_report or a.no_sizes else REAL:
        out = d / f"rw_{p.name}"
        if out.exists():
            out.unlink()
        rewrite(p, out)
        sizes[p.name] = {"before": round(size_per_gpu_hour(p), 2), "after": round(size_per_gpu_hour(out), 2)}
    res["mb_per_gpu_hour_real"] = sizes
    if not (a.only_report or a.no_sizes):  # an hour of each real recording through the Writer (two at a time)
        from multiprocessing import Pool

        with Pool(2) as pool:
            res["mb_per_gpu_hour_written_hour"] = dict(pool.map(_writer_hour, [(p, d) for p in WRITTEN]))
        worst = max(res["mb_per_gpu_hour_written_hour"].items(), key=lambda kv: kv[1]["mb_per_gpu_hour"])
        print("largest per GPU-hour:", json.dumps(worst), file=sys.stderr, flush=True)
    if a.only_sizes:
        print(json.dumps(res, indent=1))
        if a.json:
            a.json.write_text(json.dumps(res, indent=1))
        return

    for src in a.sources.split(","):
        measure_tiles(a, d, res, ROOT / "tests/data" / src)
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


def measure_tiles(a: argparse.Namespace, d: Path, res: dict, src: Path) -> None:
    """The real recording ``src`` re-written (the tile), then tiled to each of ``a.hours``: report,
    seek, export (whole, gzip, a range of one GPU), progress and replay navigation."""
    from long_ui import navigation, progress

    from memtop.storage.store import Recording

    stem = src.stem
    tile_path = d / f"tile_{stem}.memtop"
    if tile_path.exists():
        tile_path.unlink()
    rewrite(src, tile_path)
    res[f"tile_tables_bytes_{stem}"] = by_table(tile_path)
    for h in (float(x) for x in a.hours.split(",")):
        name = f"{h:g}h" if src == SRC else f"{stem}_{h:g}h"
        path = d / f"{name}.memtop"
        tile(tile_path, path, h * 3600)
        r: dict = {
            "size_mb": round(path.stat().st_size / 1e6, 1),
            "mb_per_gpu_hour": round(size_per_gpu_hour(path), 2),
        }
        r.update(report_times(path, a.runs, a.report_before))
        if a.only_report:
            res[name] = r
            print(name, json.dumps(r), file=sys.stderr, flush=True)
            continue
        rec = Recording(path)
        seeks = []
        rnd = random.Random(1)
        for _ in range(30):
            t = rec.t0 + rnd.random() * min(rec.duration, 3600.0)
            s = time.perf_counter()
            rec.seek(t)
            seeks.append(time.perf_counter() - s)
        r["seek_ms_median"] = round(1e3 * statistics.median(seeks), 1)
        r["seek_ms_max"] = round(1e3 * max(seeks), 1)
        rec.close()
        for suffix in ("json", "json.gz"):
            out = d / f"{name}.{suffix}"
            if out.exists():
                out.unlink()
            m = measure_one("export", ["export", str(path), "--perfetto", str(out)])
            r[f"export_{suffix}"] = {**m, "out_mb": round(out.stat().st_size / 1e6, 1)}
            out.unlink()
        out = d / f"{name}.range.json.gz"  # an hour of GPU 0 from the middle
        cut = ["--from", clock(h * 1800), "--to", clock(h * 1800 + min(3600, h * 1800)), "--gpu", "0"]
        m = measure_one("export", ["export", str(path), "--perfetto", str(out), "--force", *cut])
        r["export_range_json_gz"] = {**m, "range": cut, "out_mb": round(out.stat().st_size / 1e6, 2)}
        out.unlink()
        r["progress"] = progress(path)
        r["navigation"] = navigation(path)
        if a.before and h <= a.before_hours:
            # the previous version reads the old encoding: tile the real file as it was recorded
            old = d / f"{name}_before.memtop"
            tile(SRC, old, h * 3600)
            env = {**os.environ, "PYTHONPATH": str(a.before)}
            out = d / f"{name}_before.json"
            if out.exists():
                out.unlink()
            m = measure_one("export", ["export", str(old), "--perfetto", str(out)], env)
            r["before"] = {
                "mb_per_gpu_hour": round(size_per_gpu_hour(old), 2),
                "export_json": {**m, "out_mb": round(out.stat().st_size / 1e6, 1)},
                "report": measure_one("report", ["report", str(old), "--format", "json"], env),
            }
            out.unlink()
        # equality with one serial pass, in this process
        from memtop.analysis import colscan
        from memtop.outputs.report import build_report

        rec = Recording(path)
        par = build_report(rec)
        if not a.skip_serial:
            chunk = colscan.CHUNK_MIN_S
            colscan.CHUNK_MIN_S = 1e12
            s = time.perf_counter()
            ser = build_report(rec)
            r["report_serial_s"] = round(time.perf_counter() - s, 2)
            r["report_equals_serial"] = par == ser
            colscan.CHUNK_MIN_S = chunk
        rec.close()
        res[name] = r
        print(name, json.dumps(r), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
