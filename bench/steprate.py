"""The step rate a bench training loop prints once a second as a JSON line ({"t", "steps_per_s"}): the form
bench/trace_device.sh, trace_fast.sh and agent_idle.sh read (trace_job.py, trace_jax_job.py)."""

import json
import time


class StepRate:
    def __init__(self) -> None:
        self.t_last, self.n_last = time.monotonic(), 0

    def tick(self, steps: int) -> None:
        """After each step: print the rate since the last line once a second has passed."""
        now = time.monotonic()
        if now - self.t_last >= 1.0:
            rate = round((steps - self.n_last) / (now - self.t_last), 2)
            print(json.dumps({"t": round(now, 3), "steps_per_s": rate}), flush=True)
            self.t_last, self.n_last = now, steps
