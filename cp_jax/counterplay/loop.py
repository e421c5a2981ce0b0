"""One post-training round as one jitted function, and the state it carries between rounds.

    state = init(anchor_params, cfg, key)
    round_fn = make_round(net, cfg, sim, params)        # jitted; bank and anchor are arguments
    state, diag = round_fn(state, anchor_params, bank)   # until state.agent_steps reaches the budget

A CounterPlay round: record -> failures -> backtrack -> branch -> verify (-> re-run) -> distill.
A style-distillation round (the aggressive / cautious distillation baselines, `teacher_style`):
record -> distill the anchor under that style into the deployment condition on the recorded states.
Every POLICY agent-step simulated (records, branches, re-runs) is added to state.agent_steps.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from cp_jax import parallel
from cp_jax.counterplay import distill
from cp_jax.counterplay.backtrack import choose_root, make_replay, restore
from cp_jax.counterplay.branch import branch_setup, run_branches
from cp_jax.counterplay.config import FAILURE_KINDS, CounterPlayConfig
from cp_jax.counterplay.gate import make_gate
from cp_jax.counterplay.record import Failures, Recording, find_failures, pick_failures, record
from cp_jax.counterplay.verify import choose, own_success, passes
from cp_jax.policy import networks
from cp_jax.sim import conditions
from cp_jax.sim.types import Scenario, SimConfig, SimParams


@struct.dataclass
class PostState:
    """Everything a round reads and writes: a checkpoint is exactly this pytree."""

    params: Any
    opt_state: Any
    key: jax.Array
    round: jax.Array  # [] int32 rounds done
    agent_steps: jax.Array  # [] float32 post-training transitions spent (the budget)


def init(anchor_params, cfg: CounterPlayConfig, key: jax.Array) -> PostState:
    return PostState(params=anchor_params, opt_state=distill.make_optimizer(cfg).init(anchor_params), key=key,
                     round=jnp.zeros((), jnp.int32), agent_steps=jnp.zeros((), jnp.float32))


def _pick(x: jax.Array, m: jax.Array, b: jax.Array) -> jax.Array:
    """x [F, M, K, ...] -> x[f, m[f], b[f]] [F, ...]."""
    return x[jnp.arange(x.shape[0]), m, b]


def make_search(net: networks.ActorCritic, cfg: CounterPlayConfig, sim: SimConfig, params: SimParams, mesh=None):
    """search(net_params, rec, fails, key) -> (Buffer [F * T], diagnostics, agent-steps): picked
    failures -> roots -> branches -> verification -> the verified retries' samples. With a mesh
    (cp_jax.parallel) the F failures' branches are split over its devices."""
    rank = cfg.style_rank()
    deploy = conditions.style(cfg.deploy_style)
    check_others = cfg.verify_others

    replay = make_replay(net, cfg, sim, params)

    def search(p, rec: Recording, fails: Failures, key: jax.Array):
        k_pick, k_branch, k_rerun = jax.random.split(key, 3)
        picked = pick_failures(fails, k_pick, cfg.max_failures)
        root = choose_root(rec, picked, cfg)
        root_state, scenes = parallel.constrain(restore(rec, picked, root, cfg.snapshot_every, replay(p)), mesh)
        # [F, M, 1+R, ...]
        conds, keys = parallel.constrain(branch_setup(root_state, picked.agent, k_branch, cfg), mesh)
        final, trace = run_branches(net, p, root_state, scenes, picked.agent, conds, keys, params, sim)
        f, m, r = picked.agent.shape[0], cfg.samples_per_style, cfg.num_retries
        agent_fmr = jnp.broadcast_to(picked.agent[:, None, None], (f, m, r))
        factual = jax.tree.map(lambda x: x[:, :, :1], final)
        retry = jax.tree.map(lambda x: x[:, :, 1:], final)
        ok = passes(factual, retry, agent_fmr, check_others) & picked.valid[:, None, None]
        goal_t = jnp.take_along_axis(retry.goal_t, agent_fmr[..., None], axis=-1)[..., 0]
        found, best_m, best_r = choose(ok, goal_t, rank)
        chosen_cond = _pick(conds, best_m, best_r + 1)
        steps = jnp.sum(trace.counted.sum(axis=(1, 2, 3)) * picked.valid)

        verified = found
        if cfg.reverify and check_others:  # factual + chosen retry again, fresh shared key
            pair = jnp.stack([_pick(conds, best_m, jnp.zeros_like(best_m)), chosen_cond], 1)  # [F, 2, COND_DIM]
            pair_keys = jnp.broadcast_to(jax.random.split(k_rerun, f)[:, None], (f, 2, 2))
            final2, trace2 = run_branches(net, p, root_state, scenes, picked.agent, pair, pair_keys, params, sim,
                                          keep_row=False)
            again = passes(jax.tree.map(lambda x: x[:, :1], final2), jax.tree.map(lambda x: x[:, 1:], final2),
                           picked.agent[:, None], True)[:, 0]
            verified = found & again
            steps = steps + jnp.sum(trace2.counted.sum(axis=(1, 2)) * found)

        # The verified retries' samples: the failing agent's observations from the root to its goal.
        t = sim.episode_steps
        row = jax.tree.map(lambda x: _pick(x, best_m, best_r + 1), (trace.row_obs, trace.row_action, trace.row_acting))
        obs, action, acting = jax.tree.map(lambda x: x.reshape((f * t,) + x.shape[2:]), row)
        student = jnp.broadcast_to(deploy, chosen_cond.shape) if cfg.deploy_distill else conds[:, 0, 0]
        buf = distill.Buffer(
            obs=obs, action=action,
            teacher_cond=jnp.repeat(chosen_cond, t, axis=0), student_cond=jnp.repeat(student, t, axis=0),
            weight=(acting & jnp.repeat(verified, t)).astype(jnp.float32),
        )

        valid = picked.valid.astype(jnp.float32)
        style_hot = jax.nn.one_hot(best_r, r)  # [F, R]
        factual_ok = own_success(factual, agent_fmr[:, :, :1])[..., 0] & picked.valid[:, None]
        diag = dict(
            picked=valid.sum(),
            **{f"picked_{k}": jnp.sum(valid * (picked.kind == i)) for i, k in enumerate(FAILURE_KINDS)},
            root_back=jnp.sum(valid * (picked.t_fail - root)) / jnp.maximum(valid.sum(), 1.0),
            retries=valid.sum() * m * r,
            factual_goal=factual_ok.sum(),
            passed_style=ok.sum(axis=(0, 1)).astype(jnp.float32),  # [R]
            chosen_style=jnp.sum(style_hot * found[:, None], 0),  # [R]
            verified_style=jnp.sum(style_hot * verified[:, None], 0),  # [R]
            repaired=verified.sum().astype(jnp.float32),
            distilled_samples=buf.weight.sum(),
        )
        return buf, diag, steps

    return search


def make_round(net: networks.ActorCritic, cfg: CounterPlayConfig, sim: SimConfig, params: SimParams, mesh=None,
               teacher_style: str | None = None):
    """The jitted `round(state, anchor_params, bank) -> (state, diagnostics)`: CounterPlay's, or with
    teacher_style the style-distillation baseline's (the anchor under that style, no search). With a mesh
    (cp_jax.parallel; state replicated on it, the bank replicated or, for cfg.bank_groups = G > 1, grouped
    [G, S / G, ...] and split along G by `parallel.shard_groups`) the recorded episodes and the failures'
    branches are split over its devices."""
    if cfg.max_failures > cfg.num_envs * sim.max_agents:
        raise ValueError(f"CounterPlayConfig.max_failures ({cfg.max_failures}) exceeds the tasks per round "
                         f"(num_envs x max_agents = {cfg.num_envs * sim.max_agents})")
    parallel.check_divisible(cfg.num_envs, mesh, "CounterPlayConfig.num_envs")
    if teacher_style is None:
        parallel.check_divisible(cfg.max_failures, mesh, "CounterPlayConfig.max_failures")
    optimizer = distill.make_optimizer(cfg)
    loss_fn = distill.make_loss(net, cfg)
    search = make_search(net, cfg, sim, params, mesh)
    gate = make_gate(net, cfg, sim, params, mesh) if cfg.student_gate else None
    deploy = conditions.style(cfg.deploy_style)
    teacher_cond = None if teacher_style is None else conditions.style(teacher_style)
    style_states = math.ceil(cfg.distill_batch / sim.max_agents)

    def learn(state: PostState, teacher_p, anchor_p, buf, rec: Recording, key):
        def one(c, k):
            p, o = c
            k_mb, k_reg = jax.random.split(k)
            if teacher_cond is not None:
                obs, mask = distill.sample_rows(rec.states, rec.scenes, k_mb, style_states, sim)
                n = mask.shape[0]
                mb = distill.Buffer(obs=obs, action=jnp.zeros((n,), jnp.int32),
                                    teacher_cond=jnp.broadcast_to(teacher_cond, (n, teacher_cond.shape[0])),
                                    student_cond=jnp.broadcast_to(deploy, (n, deploy.shape[0])),
                                    weight=mask.astype(jnp.float32))
            else:
                mb = distill.draw(buf, k_mb, cfg.distill_batch)
            reg_obs, reg_mask = distill.sample_rows(rec.states, rec.scenes, k_reg, cfg.reg_states, sim)
            (_, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, teacher_p, anchor_p, mb, reg_obs, reg_mask)
            updates, o = optimizer.update(grads, o, p)
            stats["grad_norm"] = optax.tree.norm(grads)
            return (optax.apply_updates(p, updates), o), stats

        (p, o), stats = jax.lax.scan(one, (state.params, state.opt_state), jax.random.split(key, cfg.distill_steps))
        return p, o, jax.tree.map(jnp.mean, stats)

    @jax.jit
    def round_fn(state: PostState, anchor_params, bank: Scenario):
        key, k_rec, k_search, k_learn = jax.random.split(state.key, 4)
        rec = parallel.constrain(record(net, state.params, bank, k_rec, cfg, params, sim), mesh)
        fails = find_failures(rec, cfg, sim)
        tasks = jnp.maximum(rec.controlled.sum(), 1)
        diag = dict(
            tasks=rec.controlled.sum().astype(jnp.float32),
            record_goal_rate=1.0 - jnp.sum(fails.kind >= 0) / tasks,
            **{f"record_{k}_rate": jnp.sum(fails.kind == i) / tasks for i, k in enumerate(FAILURE_KINDS)},
        )
        steps = rec.agent_steps
        if teacher_cond is None:
            buf, search_diag, search_steps = search(state.params, rec, fails, k_search)
            diag.update(search_diag)
            steps = steps + search_steps
            teacher_p = state.params  # the policy that produced the retries, frozen for this round
        else:
            buf, teacher_p = None, anchor_params  # the anchor's own behaviour under teacher_style
        p, o, stats = learn(state, teacher_p, anchor_params, buf, rec, k_learn)
        if gate is not None:  # keep the update only if the student drives no worse (ours)
            accept, gate_diag, gate_steps = gate(state.params, p, bank, jax.random.fold_in(k_learn, 1))
            p, o = jax.tree.map(lambda new, old: jnp.where(accept, new, old), (p, o), (state.params, state.opt_state))
            diag.update(gate_diag)
            steps = steps + gate_steps
        diag.update(stats, round_steps=steps)
        new = state.replace(params=p, opt_state=o, key=key, round=state.round + 1,
                            agent_steps=state.agent_steps + steps)
        return parallel.constrain_replicated(new, mesh), diag

    return round_fn
