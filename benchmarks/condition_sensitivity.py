"""Does a conditioned policy use one field of its condition? Outcome rates as the field is swept, and
whether the critic and the actor see it.

    python benchmarks/condition_sensitivity.py --policy=assets/anchors/conditioned_small \
        [--style=normal] [--field=alpha_coll] [--values=0,0.2,1.5,3] [--scenes=200]

Held-out procedural scenes (seeds 100000.., 12 agents), one greedy self-play episode each, every
controllable agent under --style with --field set to each of --values: goal / collision / off-road /
timeout rates and mean speed. Then, on the episodes under the style itself, the critic's value and
the actor's action distribution with the field at its style value and at the first of --values:
mean V under each, KL(pi_style || pi_first) and the share of steps whose greedy action changes,
over the 2 s before each collision and over every other live step. A critic whose values part
before collisions while the actor's KL stays level has learned what the field costs, and the
actor has not learned to act on it. --json prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax.policy import distributions as dist
from cp_jax.policy import networks, saved
from cp_jax.rl import evaluate
from cp_jax.scenarios import bank as bank_lib
from cp_jax.sim import conditions, env, metrics, types
from cp_jax.sim.types import COND_FIELDS

PRE_COLLISION_STEPS = 20  # 2 s


def with_field(style: str, name: str, value: float) -> np.ndarray:
    cond = np.array(conditions.STYLES[style])
    cond[COND_FIELDS.index(name)] = value
    return cond


def sweep(pol, bank, style: str, name: str, values) -> dict:
    """{value: outcome rates and mean speed} with the field set to each value."""
    return {v: evaluate.summarise(evaluate.evaluate(pol.net, pol.params, bank, with_field(style, name, v),
                                          types.default_params(), pol.sim, jax.random.PRNGKey(0)))
            for v in values}


def critic_and_actor(pol, bank, style: str, other: np.ndarray) -> dict:
    """V, KL and greedy-action changes between the style and `other`, before collisions and elsewhere."""
    sim, params, cond = pol.sim, types.default_params(), conditions.style(style)
    other = jnp.asarray(other)

    def act(p, obs, s, key):
        logits, v_style, _ = pol.net.apply(p, obs, None)
        logits_o, v_other, _ = pol.net.apply(p, networks.with_condition(obs, other), None)
        kl = jnp.sum(jax.nn.softmax(logits) * (jax.nn.log_softmax(logits) - jax.nn.log_softmax(logits_o)), -1)
        action = dist.greedy(logits)
        return env.Act(action, None, (v_style, v_other, kl, action != dist.greedy(logits_o), s.alive))

    def episode(scenario, key):
        s0 = env.reset(scenario, key, cond, sim)
        final, traj = env.rollout(act, pol.params, s0, scenario, params, sim, sim.episode_steps)
        return final, traj.extras, s0.controller == types.POLICY

    n = jax.tree.leaves(bank)[0].shape[0]
    final, (v_style, v_other, kl, changed, alive), driven = jax.device_get(
        jax.jit(jax.vmap(episode))(bank, jax.random.split(jax.random.PRNGKey(0), n)))
    live = alive & driven[:, None, :]  # agents the policy drives (not those env.reset hands to log replay)
    collided = np.asarray(metrics.outcomes(final)["collision"]) & driven
    t_hit = np.asarray(final.first_collision_t)[:, None, :]
    t = np.arange(live.shape[1])[None, :, None]
    before = live & collided[:, None, :] & (t >= t_hit - PRE_COLLISION_STEPS) & (t < t_hit)
    out = {}
    for name, m in (("before_collision", before), ("elsewhere", live & ~before)):
        if not m.any():  # no collision at all: nothing to compare
            out[name] = dict(steps=0, v_style=None, v_other=None, kl=None, greedy_changed=None)
            continue
        out[name] = dict(steps=int(m.sum()), v_style=float(v_style[m].mean()), v_other=float(v_other[m].mean()),
                         kl=float(kl[m].mean()), greedy_changed=float(changed[m].mean()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="assets/anchors/conditioned_small")
    ap.add_argument("--style", default="normal")
    ap.add_argument("--field", default="alpha_coll", choices=COND_FIELDS)
    ap.add_argument("--values", default="0,0.2,1.5,3")
    ap.add_argument("--scenes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=100_000)
    ap.add_argument("--cache_dir", default="~/.cache/cp_jax/scenes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    values = [float(v) for v in args.values.split(",")]

    pol = saved.load(args.policy)
    if pol.net.cfg.lstm:
        raise SystemExit(f"{args.policy}: an LSTM policy (NetConfig.lstm={pol.net.cfg.lstm}); this script runs "
                         "feed-forward policies only")
    _, bank = bank_lib.cached_procedural_bank(args.cache_dir, args.scenes, args.seed, 12, pol.sim)
    rows = sweep(pol, bank, args.style, args.field, values)
    print(f"{args.policy} under {args.style}, {args.field} swept ({args.scenes} scenes):")
    for v, r in rows.items():
        print(f"  {args.field}={v:<8g} " + ", ".join(f"{k} {x:.3f}" for k, x in r.items() if k != "agents"))
    seen = critic_and_actor(pol, bank, args.style, with_field(args.style, args.field, values[0]))
    style_value = float(conditions.field(conditions.STYLES[args.style], args.field))
    print(f"critic and actor, {args.field} {style_value:g} (the style) vs {values[0]:g}:")
    for name, r in seen.items():
        if not r["steps"]:
            print(f"  {name:17s}      0 steps")
            continue
        print(f"  {name:17s} {r['steps']:6d} steps  V {r['v_style']:.3f} vs {r['v_other']:.3f}  "
              f"KL {r['kl']:.4f}  greedy action changed {r['greedy_changed']:.3f}")
    if args.json:
        print(json.dumps(dict(policy=args.policy, style=args.style, field=args.field,
                              sweep={str(v): r for v, r in rows.items()}, critic_actor=seen)))


if __name__ == "__main__":
    main()
