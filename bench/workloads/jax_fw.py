"""JAX workload: a jitted training step with a host round trip, device_get of metrics, transfers,
a Python-bound loop, and a compute-bound negative control that waits in block_until_ready.

usage: python bench/workloads/jax_fw.py --markers M.jsonl [--seed S] [--scale X] [--phase-s 5]
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from wl import Waits, args, run, spin  # noqa: E402

A = args(__doc__)
S = A.scale
key = jax.random.PRNGKey(A.seed)
BIG = jax.random.normal(key, (8192, 8192), dtype=jnp.bfloat16)
W = int(2048 * S) // 64 * 64
params = [jax.random.normal(jax.random.fold_in(key, i), (W, W), dtype=jnp.bfloat16) * 0.02 for i in range(4)]
X = jax.random.normal(key, (int(16384 * S), W), dtype=jnp.bfloat16)  # ~3 ms a step: as long as the Python


@jax.jit
def matmul(a):
    return a @ a


def loss_fn(ps, x):
    for p in ps:
        x = jax.nn.gelu(x @ p)
    return jnp.mean(x.astype(jnp.float32) ** 2)


@jax.jit
def train_step(ps, x):
    loss, g = jax.value_and_grad(loss_fn)(ps, x)
    return [p - 1e-4 * gp for p, gp in zip(ps, g)], {
        "loss": loss,
        "gnorm": jnp.sqrt(sum(jnp.sum(gp.astype(jnp.float32) ** 2) for gp in g)),
    }


@jax.jit
def tiny(v):
    return v * 1.0001 + 1


matmul(BIG).block_until_ready()
train_step(params, X)[1]["loss"].block_until_ready()
tiny(jnp.ones(16)).block_until_ready()


def jax_compute(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        for _ in range(10):
            y = matmul(BIG)
        y.block_until_ready()
        n += 10
    return {"matmuls": n}


def jax_float_loss(end: float) -> dict:
    global params
    n, hist, w = 0, [], Waits()
    while time.monotonic() < end:
        spin(4 * S)
        params, m = train_step(params, X)
        hist.append(w.timed(float, m["loss"]))  # the host round trip
        n += 1
    return {"steps": n, "wait_frac": w.frac()}


def jax_device_get(end: float) -> dict:
    global params
    n, w = 0, Waits()
    while time.monotonic() < end:
        spin(3 * S)
        params, m = train_step(params, X)
        m = w.timed(jax.device_get, m)
        n += 1
    return {"steps": n, "wait_frac": w.frac()}


def jax_python(end: float) -> dict:
    v, n = jnp.ones(16), 0
    while time.monotonic() < end:
        spin(5)
        for _ in range(5):
            v = tiny(v)
        n += 1
    return {"steps": n}


HOST = np.ones(int(64 * S) << 20, dtype=np.float32)


def jax_transfer(end: float) -> dict:
    n = 0
    while time.monotonic() < end:
        d = jax.device_put(HOST)
        d.block_until_ready()
        back = np.asarray(d + 1)
        n += 1
    del back
    return {"bytes_each_way": n * HOST.nbytes}


PHASES = {
    "jax_compute": ("compute", jax_compute),
    "jax_float_loss": ("sync", jax_float_loss),
    "jax_device_get": ("sync", jax_device_get),
    "jax_python": ("cpu", jax_python),
    "jax_transfer": ("transfer", jax_transfer),
}

if __name__ == "__main__":
    run(A, PHASES)
