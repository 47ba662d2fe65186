"""Each job's own label on a shared GPU (issue #37), scored against the job's own markers.

Recordings of bench/workloads/shared_jobs.sh: two jobs on GPU 0, each marker naming its job and the
job's pid (facts). memtop.analysis.jobshare labels each job; bench/score.py scores each job's labels against
that job's markers (per 0.5 s bin, outside a guard band at each of its own phase edges).
usage: python bench/shared_accuracy.py [--guard 0.5] [--confusion] RUN.memtop ...

Training runs (tuned on): tests/data/jobs/train_shared_s1, _s2. Frozen at 216893c; the held-out runs,
declared before they were recorded (bench/workloads/shared_jobs.sh NAME:SEED:PHASES), are HELDOUT:
s301 has both jobs compute-bound at once (seeds 301/1301 draw compute first for both), s303 is a third
mix whose producers (a multiprocessing Queue, a thread pool) no training run had.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from score import score

from memtop.analysis.jobshare import JobLabeller
from memtop.storage.store import Recording

HELDOUT = (
    "heldout_shared_s301:301:compute+loader+pool+python",
    "heldout_shared_s302:302:compute+loader+pool+python",
    "heldout_shared_s303:303:compute+queue+threads+python",
    "heldout_shared_s304:304:compute+loader+pool+python",
)


def job_scores(path: str, guard: float) -> list[dict]:
    rec = Recording(path)
    jl = JobLabeller().feed_all(rec.frames())
    markers = rec.markers()
    out = []
    for key, labels in jl.labels.get(0, {}).items():
        job = jl.jobs[key]
        mine = [m for m in markers if json.loads(m.facts or "{}").get("pid") in job.pids]
        s = score(labels, mine, guard=guard, bin_s=0.5)
        s["job"] = f"{mine[0].name.split('/')[0] if mine else '?'} {job.title}"
        out.append(s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--guard", type=float, default=0.5)
    ap.add_argument("--confusion", action="store_true")
    a = ap.parse_args()
    right = total = 0
    print("| run | job | scored s | right | accuracy |\n|---|---|---|---|---|")
    conf: Counter = Counter()
    for p in a.runs:
        for s in job_scores(p, a.guard):
            ok = round(s["accuracy"] * s["bins"])
            right, total = right + ok, total + s["bins"]
            conf.update(s["confusion"])
            print(
                f"| {p.rsplit('/', 1)[-1]} | {s['job']} | {s['bins'] / 2:.1f} | {ok / 2:.1f} | {s['accuracy']:.3f} |"
            )
    print(f"\nall jobs: {right / 2:.1f} of {total / 2:.1f} s right = {right / max(1, total):.3f}")
    if a.confusion:
        print("truth->label bins:", dict(sorted(conf.items())))


if __name__ == "__main__":
    main()
