"""Multi-host flags shared by the training launchers (launch.train_anchor, launch.post_train).

Every process of the run starts the same command with its own --process_id (or the JAX_* variables,
or, on a TPU pod / under SLURM, CP_JAX_DISTRIBUTED=auto and jax.distributed's own detection):

    python -m launch.train_anchor --config=experiments/anchor_large.py --workdir=/shared/run \
        --coordinator=host0:1234 --num_processes=4 --process_id=$RANK

The workdir must be one folder every process sees (orbax writes the checkpoints from all of them;
logs, evaluations and the final policy are written by process 0 only). Flags that do not describe one
run (--num_processes < 1, --process_id outside [0, --num_processes), several processes without
--coordinator) are a one-line usage error.
"""

from __future__ import annotations

from absl import app, flags

flags.DEFINE_string("coordinator", "", "multi-host: address:port of process 0 (jax.distributed); empty: "
                    "JAX_COORDINATOR_ADDRESS, or CP_JAX_DISTRIBUTED=auto, or a single process")
flags.DEFINE_integer("num_processes", 0, "multi-host: number of processes (or JAX_NUM_PROCESSES)")
flags.DEFINE_integer("process_id", -1, "multi-host: this process's index (or JAX_PROCESS_ID)")


def init() -> bool:
    """Join the multi-host run the flags or environment describe (before any other JAX call). Flags that do
    not describe one run (cp_jax.parallel.processes) are a usage error naming the flag, before any work."""
    from cp_jax import parallel

    f = flags.FLAGS
    if f["num_processes"].present and f.num_processes < 1:
        raise app.UsageError(f"--num_processes={f.num_processes}: must be >= 1 (the processes of a multi-host run, "
                             "with --coordinator and --process_id); leave it out for a single process")
    if f["process_id"].present and f.process_id < 0:
        raise app.UsageError(f"--process_id={f.process_id}: must be >= 0 (this process's index in [0, "
                             "--num_processes))")
    try:
        parallel.processes(f.coordinator, f.num_processes, f.process_id)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    return parallel.initialize(f.coordinator, f.num_processes, f.process_id)
