"""A small JAX loop on the GPU for `memtop run` + `memtop trace` (bench/trace_tui.sh): a jitted MLP step
(matmuls, an update) on device arrays, its step rate per second as JSON lines.
usage: trace_jax_job.py SECONDS
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
from steprate import StepRate


@jax.jit
def step(w1, w2, x):
    def loss(w1, w2):
        return jnp.mean(jnp.square(jnp.tanh(x @ w1) @ w2))

    g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 1e-3 * g1, w2 - 1e-3 * g2


def main() -> None:
    seconds = float(sys.argv[1])
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    w1 = jax.random.normal(k1, (2048, 4096))
    w2 = jax.random.normal(k2, (4096, 2048))
    x = jax.random.normal(k3, (512, 2048))
    w1, w2 = step(w1, w2, x)
    w1.block_until_ready()
    print(json.dumps({"ready": time.monotonic(), "devices": [str(d) for d in jax.devices()]}), flush=True)
    end, steps = time.monotonic() + seconds, 0
    rate = StepRate()
    while time.monotonic() < end:
        w1, w2 = step(w1, w2, x)
        steps += 1
        if steps % 20 == 0:
            w1.block_until_ready()
        rate.tick(steps)


if __name__ == "__main__":
    main()
