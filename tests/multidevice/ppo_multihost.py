"""Two processes x 2 host devices through jax.distributed on localhost (gloo collectives on CPU):
data-parallel PPO over the 4 global devices with the bank split in 4 scene groups (each process
builds only its own): the same updates as tests/multidevice/ppo_sharded.py's grouped run. (The LSTM
run with a replicated bank is checked on 4 devices in one process only.)
tests/test_parallel.py starts both processes; each prints its parameters' checksums as JSON.

    python -m tests.multidevice.ppo_multihost PROCESS_ID PORT
"""

import json
import sys

import jax

from cp_jax import parallel


def main():
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    assert parallel.initialize(f"localhost:{sys.argv[2]}", num_processes=2, process_id=int(sys.argv[1]))
    assert jax.process_count() == 2 and len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    from tests.multidevice.ppo_sharded import GROUPS, checksums, run_groups

    mesh = parallel.make_mesh()
    grouped, _, _, _ = run_groups(mesh, 3)  # this process builds only its devices' scene groups
    print(json.dumps(dict(process=jax.process_index(), groups_read=parallel.local_groups(GROUPS, mesh),
                          groups_agent_steps=float(parallel.local(grouped.agent_steps)),
                          groups_checksums=checksums(parallel.local(grouped.params)))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
