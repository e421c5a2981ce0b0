"""Each reward term's per-agent episode sum for different drivers under one style: what the reward
actually pays for, e.g. whether reaching the goal outweighs the comfort penalties it costs.

    python benchmarks/reward_terms.py --policy=assets/anchors/ppo_small --policy=assets/anchors/conditioned_small \
        --idm --style=normal [--direct]

Held-out procedural scenes (seeds 100000+), every controllable agent driven by the same driver
(greedy policy actions, or IDM), the named style's condition for everyone. Prints, per driver, the
mean over controlled agents of each term's undiscounted and gamma-discounted sum, and the outcome
rates. --direct uses the actuator-free bicycle (`actuator_lag=1, max_lat_accel=inf`). The terms are
recomputed from consecutive states with `reward.reward_terms`, the function `env.step` sums.
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app, flags

flags.DEFINE_multi_string("policy", [], "saved policy folders")
flags.DEFINE_bool("idm", False, "also drive every agent with IDM")
flags.DEFINE_string("style", "normal", "named style (condition) of every agent")
flags.DEFINE_bool("direct", False, "the actuator-free bicycle (the dynamics before the actuator)")
flags.DEFINE_integer("scenes", 28, "held-out procedural scenes")
flags.DEFINE_float("gamma", 0.98, "discount of the discounted sums")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from cp_jax.policy import distributions as dist
    from cp_jax.policy import saved
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.sim import conditions, env, geometry, metrics, reward, types

    drivers = [(os.path.basename(os.path.normpath(p)), saved.load(p)) for p in FLAGS.policy]
    if FLAGS.idm:
        drivers.append(("idm", None))
    if not drivers:
        raise app.UsageError("give --policy and/or --idm")
    sim = drivers[0][1].sim if drivers[0][1] is not None else types.SimConfig(max_agents=16, obs_road=64)
    sim = dataclasses.replace(sim, enable_idm=True)
    _, bank = bank_lib.cached_procedural_bank("~/.cache/cp_jax/scenes", FLAGS.scenes, 100_000, 12,
                                              dataclasses.replace(sim, enable_idm=False))
    params = types.default_params(**(dict(actuator_lag=1.0, max_lat_accel=float("inf")) if FLAGS.direct else {}))
    cond = conditions.style(FLAGS.style)
    disc = FLAGS.gamma ** np.arange(sim.episode_steps)

    def act(p, obs, s, key):
        if p is None:  # IDM: its controller ignores the action
            return jnp.zeros((sim.max_agents,), jnp.int32)
        return dist.greedy(p.net.apply(p.params, obs, None)[0])

    def episode(pol, scenario, key):
        ctrl = types.IDM if pol is None else types.POLICY
        s0 = env.reset(scenario, key, cond, sim, jnp.full((sim.max_agents,), ctrl))
        final, traj = env.rollout(act, pol, s0, scenario, params, sim, sim.episode_steps, keep_states=True)
        states = env.stack_states(traj.state, final)
        s, s1, out = jax.tree.map(lambda x: x[:-1], states), jax.tree.map(lambda x: x[1:], states), traj.out

        def terms_of(s, s1, out):  # the reward's terms of one step, from the states either side of it
            th, lat, _, on_lane = geometry.lane_frame(s1.xy, s1.yaw, scenario, sim)
            jerk_long, jerk_lat = (s1.accel - s.accel) / sim.dt, (s1.lat_accel - s.lat_accel) / sim.dt
            kin = reward.Kinematics(speed=s1.speed, accel=s1.accel, lat_accel=s1.lat_accel, jerk_long=jerk_long,
                                    jerk_lat=jerk_lat, heading_err=th, lateral=lat, on_lane=on_lane)
            first_goal = out.at_goal & (s.goal_t == types.INF_T)
            terms = reward.reward_terms(s.cond, kin, out.collided, out.offroad, first_goal, sim.dt)
            live = out.active & (s1.alive | out.terminated)
            return {k: jnp.where(live, v, 0.0) for k, v in terms.items()}

        return final, jax.vmap(terms_of)(s, s1, out), s0.controller == ctrl

    keys = jax.random.split(jax.random.PRNGKey(0), FLAGS.scenes)
    for name, pol in drivers:
        final, terms, controlled = jax.jit(jax.vmap(lambda sc, k: episode(pol, sc, k)))(bank, keys)  # noqa: B023
        m = np.asarray(controlled)
        row = {k: (round(float(np.asarray(v).sum(1)[m].mean()), 4),
                   round(float((np.asarray(v) * disc[None, :, None]).sum(1)[m].mean()), 4)) for k, v in terms.items()}
        row["SUM"] = tuple(round(sum(row[k][i] for k in terms), 4) for i in range(2))
        rates = {k: round(float((np.asarray(v) & m).sum() / m.sum()), 3) for k, v in metrics.outcomes(final).items()}
        print(json.dumps(dict(driver=name, style=FLAGS.style, direct=FLAGS.direct, terms=row, outcomes=rates)))


if __name__ == "__main__":
    app.run(main)
