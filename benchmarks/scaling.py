"""Scaling: agent-steps/s of the simulator, PPO and CounterPlay over device counts and batch sizes.

    python benchmarks/scaling.py --devices=1,2,4 --batch=16,32,64 [--workloads=env,ppo,counterplay] [--json]

For every device count D (one child process each, so that on a CPU the D devices can be forced
with XLA_FLAGS=--xla_force_host_platform_device_count=D, and every row's memory peak is its own)
and global batch B (a multiple of D), after compilation, median of --repeats calls:

  env          B procedural scenes, observe + step with random actions for --steps steps
               (lax.scan, the scenes split over the devices); agent-steps = alive POLICY agents
  ppo          one PPO update of the shipped anchor (B envs x --steps rollout steps, the
               experiments/anchor_small.py learning settings, compaction in --compact_groups groups,
               by default one per device); agent-steps = valid samples
  counterplay  one CounterPlay round of the shipped anchor (B recorded episodes, B failures x
               (1 + 5) branches, re-runs, 8 distillation steps; a snapshot every --snapshot_every
               steps); agent-steps = what the budget counts

Scenes come from the procedural cache (28 scenes, seeds 0-27, 12 agents). Rows report
agent_steps_per_s, compile_s, XLA's per-device memory account of the compiled program (arguments,
outputs, temporaries: `program_gb`; with --memory_only nothing else, so large batches can be sized
without running them), peak RSS and, where the backend reports it (GPU / TPU), peak device
memory. With --json the last line is one JSON object: {"agent_steps_per_s": {workload: {"D=d,B=b":
value}}, "rows": [...], "device": ...}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("env", "ppo", "counterplay")


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="1", help="comma-separated device counts")
    ap.add_argument("--batch", default="16,32", help="comma-separated global batch sizes (scenes / failures)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--steps", type=int, default=45, help="steps per env rollout and PPO update")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small",
                    help="a saved policy, or 'large': the accelerator config of experiments/anchor_large.py "
                         "(3 x 1024 towers, 128 road segments observed), randomly initialised")
    ap.add_argument("--scenes", type=int, default=28)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes",
                    help="procedural scene cache; empty: generate the scenes in memory (no TFDS needed)")
    ap.add_argument("--compact_groups", type=int, default=0,
                    help="PPOConfig.compact_groups of the ppo workload; 0: the device count (device-local compaction), "
                         "1: one global compaction (what experiments/anchor_small.py uses)")
    ap.add_argument("--snapshot_every", type=int, default=1,
                    help="CounterPlayConfig.snapshot_every of the counterplay workload (1: every step's state kept)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--memory_only", action="store_true",
                    help="compile only: XLA's per-device memory account of each program, no timing")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one device count, rows as JSON
    return ap.parse_args(argv)


def main():
    args = _args()
    if args.child:
        return _child(args)
    rows = []
    for d in [int(x) for x in args.devices.split(",")]:
        env = dict(os.environ)
        if env.get("JAX_PLATFORMS", "cpu") == "cpu" or not env.get("JAX_PLATFORMS"):
            flags = [f for f in env.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
            env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={d}"])
        cmd = [sys.executable, os.path.join(HERE, "scaling.py"), "--child", f"--devices={d}",
               *[a for a in sys.argv[1:] if not a.startswith(("--devices", "--json"))]]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"scaling: the child for {d} device(s) failed")
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                rows.append(row)
                if not args.json:
                    speed = f"{row['agent_steps_per_s']:>12,.0f}" if "agent_steps_per_s" in row else f"{'-':>12}"
                    print(f"{row['workload']:>11} | D={row['devices']:<2} B={row['batch']:<5} | {speed} agent-steps/s"
                          f" | compile {row['compile_s']:5.1f} s | program {row.get('program_gb', 0):.3f} GB/device"
                          f" | peak {row.get('peak_device_gb', row.get('peak_rss_gb', 0)):.2f} GB | {row['device']}",
                          flush=True)
    if args.json:
        table: dict[str, dict[str, float]] = {}
        for r in rows:
            if "agent_steps_per_s" in r:
                table.setdefault(r["workload"], {})[f"D={r['devices']},B={r['batch']}"] = r["agent_steps_per_s"]
        print(json.dumps(dict(agent_steps_per_s=table, rows=rows, device=rows[0]["device"] if rows else "")))
    return 0


def _compiled_memory_gb(compiled) -> dict[str, float]:
    """XLA's own account of one compiled program, per device: arguments, outputs and temporaries (GB).
    Their sum is what one call needs on each device beyond the runtime's own."""
    m = compiled.memory_analysis()
    if m is None:
        return {}
    sizes = dict(argument_gb=m.argument_size_in_bytes, output_gb=m.output_size_in_bytes,
                 temp_gb=m.temp_size_in_bytes, alias_gb=getattr(m, "alias_size_in_bytes", 0))
    out = {k: v / 2**30 for k, v in sizes.items()}
    out["program_gb"] = out["argument_gb"] + out["output_gb"] + out["temp_gb"] - out["alias_gb"]
    return out


def _child(args) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from common import peak_memory_gb, procedural_bank, timed

    from cp_jax import parallel
    from cp_jax.counterplay import loop
    from cp_jax.counterplay.config import CounterPlayConfig
    from cp_jax.policy import networks, saved
    from cp_jax.rl import ppo
    from cp_jax.sim import conditions, env, types

    mesh = parallel.make_mesh(int(args.devices))
    if args.policy == "large":
        small = saved.load("assets/anchors/conditioned_small")
        sim = dataclasses.replace(small.sim, obs_road=128)
        net = networks.ActorCritic(networks.large())
        pol = saved.SavedPolicy(net, networks.init_params(net.cfg, sim, jax.random.PRNGKey(0)), sim)
    else:
        pol = saved.load(args.policy)
    sim, params = pol.sim, types.default_params()
    bank = procedural_bank(args.cache_dir, args.scenes, args.agents, sim)
    bank = parallel.replicate(bank, mesh)
    anchor = parallel.replicate(pol.params, mesh)
    device = f"{jax.devices()[0].device_kind} x {parallel.size(mesh)}"

    def env_workload(b: int):
        n = jax.tree.leaves(bank)[0].shape[0]
        idx = parallel.shard_batch(jnp.arange(b) % n, mesh)

        @jax.jit
        def run(idx, key):
            scenes = parallel.constrain(jax.vmap(env.take_scenario, in_axes=(None, 0))(bank, idx), mesh)
            cond = jnp.broadcast_to(conditions.style("normal"), (b, sim.max_agents, types.COND_DIM))
            s0 = jax.vmap(lambda sc, k, c: env.reset(sc, k, c, sim))(scenes, jax.random.split(key, b), cond)

            def body(s, k):
                obs = jax.vmap(lambda st, sc: env.observe(st, sc, sim))(s, scenes)
                a = jax.random.randint(k, s.xy.shape[:2], 0, 91) + 0 * obs.ego[..., 0].astype(jnp.int32)
                s, out = jax.vmap(lambda st, ac, sc: env.step(st, ac, sc, params, sim))(s, a, scenes)
                return s, jnp.sum(out.active & (s.controller == types.POLICY))

            return jax.lax.scan(body, s0, jax.random.split(key, args.steps))[1].sum()

        return run, (idx, jax.random.PRNGKey(0)), (lambda out: float(out)), {}

    def ppo_workload(b: int):
        cfg = ppo.PPOConfig(num_envs=b, rollout_steps=args.steps, update_epochs=2, num_minibatches=4,
                            sample_capacity=0.3, lr=1e-3, compact_groups=args.compact_groups or parallel.size(mesh))
        runner = ppo.init(pol.net, cfg, sim, jax.random.PRNGKey(0), bank)
        runner = ppo.shard_runner(runner.replace(params=pol.params, opt_state=ppo.make_optimizer(cfg).init(pol.params)),
                                  mesh)
        update = ppo.make_update(pol.net, cfg, sim, params, mesh=mesh)
        return (update, (runner, bank), (lambda out: float(out[0].agent_steps - runner.agent_steps)),
                dict(compact_groups=cfg.compact_groups))

    def counterplay_workload(b: int):
        cfg = CounterPlayConfig(num_envs=b, max_failures=b, root_rule="fixed", window=30, distill_steps=8,
                                snapshot_every=args.snapshot_every)
        state = parallel.replicate(loop.init(pol.params, cfg, jax.random.PRNGKey(0)), mesh)
        round_fn = loop.make_round(pol.net, cfg, sim, params, mesh)
        # Snapshots: the record keeps every k-th step's SimState of every episode (one scene's slots).
        s0 = jax.eval_shape(lambda: env.reset(env.take_scenario(bank, 0), jax.random.PRNGKey(0),
                                              conditions.style("normal"), sim))
        per_step = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(s0))
        kept = -(-sim.episode_steps // cfg.snapshot_every)
        extra = dict(snapshot_bytes_per_step=per_step, snapshot_every=cfg.snapshot_every,
                     snapshot_mb_per_round=per_step * kept * b / 2**20)
        return round_fn, (state, anchor, bank), (lambda out: float(out[1]["round_steps"])), extra

    makers = dict(env=env_workload, ppo=ppo_workload, counterplay=counterplay_workload)
    for name in args.workloads.split(","):
        for b in [int(x) for x in args.batch.split(",")]:
            if b % parallel.size(mesh):
                continue  # not splittable over these devices
            fn, fn_args, steps_of, extra = makers[name](b)
            t0 = time.perf_counter()
            compiled = fn.lower(*fn_args).compile()
            compile_s = time.perf_counter() - t0
            row = dict(workload=name, devices=parallel.size(mesh), batch=b, compile_s=compile_s, device=device,
                       **_compiled_memory_gb(compiled), **extra)
            if not args.memory_only:
                seconds, out = timed(lambda f=fn, a=fn_args: f(*a), args.repeats)
                row.update(agent_steps_per_s=steps_of(out) / seconds, call_s=seconds, **peak_memory_gb())
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
