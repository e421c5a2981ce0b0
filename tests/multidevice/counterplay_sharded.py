"""Run under 4 forced host devices (tests/test_parallel.py starts it in its own process): two
CounterPlay rounds with records and branches split over a 4-device mesh vs one device, with the bank in
4 scene groups split over the devices (bank_groups), whose compiled round must not gather the bank onto
every device. (A replicated bank under a mesh is PPO's default layout, checked in ppo_sharded.py.)"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from cp_jax import parallel
from cp_jax.counterplay import loop, record
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import networks
from cp_jax.sim import conditions, env, types
from tests.multidevice.ppo_sharded import max_diff
from tests.test_counterplay import NET, SIM, _keep_going_params, _shifted_bank

GROUPS = 4
COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")


def run(mesh, groups):
    """(final state, per-round diagnostics, compiled HLO text (with a mesh), bank) of two rounds."""
    net, anchor = networks.ActorCritic(NET), _keep_going_params()
    # 9 scenes per group (shapes [G, 9, ...] / [9 G, ...] that nothing else in the round has).
    bank = env.group_bank(_shifted_bank([8.0 * i for i in range(9 * groups)]), groups)
    cfg = CounterPlayConfig(num_envs=4, max_failures=4, root_rule="value", window=20,
                            styles=("cautious", "aggressive"), deploy_style="cautious", distill_steps=3,
                            distill_batch=32, reg_states=2, lr=1e-3, bank_groups=groups)
    state = loop.init(anchor, cfg, jax.random.PRNGKey(5))
    if mesh is not None:
        state, anchor = (parallel.replicate(x, mesh) for x in (state, anchor))
        bank = parallel.shard_groups(bank, mesh, groups)
    round_fn = loop.make_round(net, cfg, SIM, types.default_params(), mesh)
    hlo = ""
    if mesh is not None:  # the compiled program is read, then run (not compiled a second time)
        round_fn = round_fn.lower(state, anchor, bank).compile()
        hlo = round_fn.as_text()
    diags = []
    for _ in range(2):
        state, diag = round_fn(state, anchor, bank)
        diags.append(jax.device_get(diag))
    return state, diags, hlo, bank


def compare(one, d_one, four, d_four) -> dict:
    return dict(
        max_param_diff=max_diff(one.params, four.params),
        repaired=[float(d["repaired"]) for d in d_four],
        same_diag=all(np.allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-3, atol=1e-5)
                      for a, b in zip(d_one, d_four, strict=True) for k in a),
        same_steps=float(one.agent_steps) == float(four.agent_steps),
        params_replicated=bool(jax.tree.leaves(four.params)[0].sharding.is_fully_replicated),
    )


def bank_collectives(hlo: str, bank) -> list[str]:
    """The compiled program's collectives whose result has the shape of a whole bank leaf (grouped
    [G, S / G, ...] or flat [S, ...]): what gathering the bank onto every device would look like."""
    whole = set()
    for x in jax.tree.leaves(bank):
        whole |= {",".join(map(str, x.shape)), ",".join(map(str, (x.shape[0] * x.shape[1], *x.shape[2:])))}
    hits = []
    for line in hlo.splitlines():
        op = line.split("=", 1)[-1]
        if any(f" {c}(" in op or f" {c}-start(" in op for c in COLLECTIVES):
            shapes = {s.split("]")[0] for s in op.split("[")[1:]}
            if shapes & whole:
                hits.append(line.strip()[:200])
    return hits


def main():
    assert len(jax.devices()) == 4, jax.devices()
    # Records drive every agent under the cautious style (as test_counterplay's cautious_records fixture):
    # the keep-going cars then all time out, so every round has failures to repair.
    cautious = conditions.style("cautious")
    record.conditions.sample = lambda key, shape=(): jnp.broadcast_to(cautious, (*shape, types.COND_DIM))
    one_g, d_one_g, _, _ = run(None, GROUPS)
    four_g, d_four_g, hlo, bank = run(parallel.make_mesh(), GROUPS)
    out = dict(
        compare(one_g, d_one_g, four_g, d_four_g),
        bank_shards=sorted({tuple(s.data.shape) for s in jax.tree.leaves(bank)[0].addressable_shards}),
        bank_leaf_shape=list(jax.tree.leaves(bank)[0].shape),
        collectives=sum(any(f" {c}" in line for c in COLLECTIVES) for line in hlo.splitlines()),
        bank_collectives=bank_collectives(hlo, bank),
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
