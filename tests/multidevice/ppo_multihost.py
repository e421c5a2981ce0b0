"""Two processes x 2 host devices through jax.distributed on localhost (gloo collectives on CPU):
data-parallel PPO over the 4 global devices. tests/test_parallel.py starts both processes and a
one-device reference (`single`), each printing the checksums of its parameters as JSON.

    python -m tests.multidevice.ppo_multihost PROCESS_ID PORT     # or: single
"""

import json
import sys

import jax
import numpy as np


def main():
    mode = sys.argv[1]
    if mode != "single":
        from cp_jax import parallel

        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        assert parallel.initialize(f"localhost:{sys.argv[2]}", num_processes=2, process_id=int(mode))
        assert jax.process_count() == 2 and len(jax.devices()) == 4 and len(jax.local_devices()) == 2
        mesh = parallel.make_mesh()
    else:
        mesh = None
    from tests.multidevice.ppo_sharded import run

    runner, stats = run(mesh, 3)
    params = parallel_local(runner.params)
    out = dict(process=jax.process_index(), agent_steps=float(parallel_local(runner.agent_steps)),
               checksums=[float(np.abs(np.asarray(x)).sum()) for x in jax.tree.leaves(params)],
               goal_rate=[s["goal_rate"] for s in stats])
    print(json.dumps(out), flush=True)
    return 0


def parallel_local(tree):
    from cp_jax import parallel

    return parallel.local(tree)


if __name__ == "__main__":
    sys.exit(main())
