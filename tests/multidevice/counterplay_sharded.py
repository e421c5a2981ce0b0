"""Run under 4 forced host devices (tests/test_parallel.py starts it in its own process): two
CounterPlay rounds with records and branches split over a 4-device mesh vs one device."""

import json
import sys

import jax
import numpy as np

from cp_jax import parallel
from cp_jax.counterplay import loop
from cp_jax.counterplay.config import CounterPlayConfig
from cp_jax.policy import networks
from cp_jax.sim import types
from tests.multidevice.ppo_sharded import max_diff
from tests.test_counterplay import NET, SIM, _bank, _keep_going_params


def run(mesh):
    bank, net, anchor = _bank(), networks.ActorCritic(NET), _keep_going_params()
    cfg = CounterPlayConfig(num_envs=4, max_failures=4, record_style="cautious", root_rule="value", window=20,
                            styles=("cautious", "aggressive"), deploy_style="cautious", distill_steps=3,
                            distill_batch=32, reg_states=2, lr=1e-3)
    state = loop.init(anchor, cfg, jax.random.PRNGKey(5))
    if mesh is not None:
        state, anchor, bank = (parallel.replicate(x, mesh) for x in (state, anchor, bank))
    round_fn = loop.make_round(net, cfg, SIM, types.default_params(), mesh)
    diags = []
    for _ in range(2):
        state, diag = round_fn(state, anchor, bank)
        diags.append(jax.device_get(diag))
    return state, diags


def main():
    assert len(jax.devices()) == 4, jax.devices()
    one, d_one = run(None)
    four, d_four = run(parallel.make_mesh())
    out = dict(
        max_param_diff=max_diff(one.params, four.params),
        repaired=[float(d["repaired"]) for d in d_four],
        same_diag=all(np.allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-3, atol=1e-5)
                      for a, b in zip(d_one, d_four, strict=True) for k in a),
        same_steps=float(one.agent_steps) == float(four.agent_steps),
        params_replicated=bool(jax.tree.leaves(four.params)[0].sharding.is_fully_replicated),
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
