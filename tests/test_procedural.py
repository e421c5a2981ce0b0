"""Procedural scenes: valid starts, reachable goals, collision-free logs, real interaction."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.scenarios.builder import build_scenario
from cp_jax.scenarios.procedural import generator, layouts
from cp_jax.sim import conditions, env, geometry, types

CFG = types.SimConfig(max_agents=32, max_road_segments=2048, max_lanes=64, obs_road=64, grid_size=32)
CROSSING = ("four_way", "t_junction", "merge", "roundabout", "left_turn")


@functools.cache
def scene(kind, seed):
    return generator.generate(seed, kind, num_agents=10)


@jax.jit
def _replay(scenario):
    """Log replay of everyone through the simulator: events per step [T-1, A]."""
    _, traj = env.replay_log(scenario, types.default_params(), CFG)
    return traj.out.collided, traj.out.offroad


def _start_lane(raw, i):
    """The lane of object i's route that its start lies on."""
    return raw.routes[i][0]


@pytest.mark.parametrize("kind", layouts.ALL_KINDS)
def test_scene_is_valid(kind):
    raw = scene(kind, 0)
    sc = build_scenario(raw, CFG)
    n = raw.num_objects
    assert raw.controllable.sum() >= 3
    # No object starts off-road or overlapping another.
    corners = geometry.box_corners(sc.log_xy[:, 0], sc.log_yaw[:, 0], sc.size)
    sd = np.asarray(geometry.edge_distance(corners, sc, CFG, anchor=sc.log_xy[:, 0]))[:n]
    assert (sd <= 0).all(), f"{kind}: objects starting off-road: {np.flatnonzero((sd > 0).any(1))}"
    overlap = np.asarray(geometry.overlap_matrix(sc.log_xy[:, 0], sc.log_yaw[:, 0], sc.size))[:n, :n]
    assert not overlap.any()
    # Every controllable agent's goal lies on its route, reachable along the lane graph.
    for i in np.flatnonzero(raw.controllable):
        route = raw.routes[i]
        assert route, f"object {i} has no route"
        for a, b in zip(route[:-1], route[1:], strict=True):
            assert b in raw.lane_succ[a]
        goal_lane = min(route, key=lambda lane: np.min(np.linalg.norm(raw.lanes[lane] - raw.goal[i], axis=1)))
        d = np.min(
            [np.min(np.linalg.norm(layouts.resample(raw.lanes[lane], 0.5) - raw.goal[i], axis=1)) for lane in route]
        )
        assert d < 0.5, f"{kind}: goal of {i} is {d:.2f} m off its route"
        assert layouts.lane_graph_reachable(raw, _start_lane(raw, i), goal_lane)
    # The logs themselves are collision-free and on-road (log replay of everyone).
    collided, offroad = jax.device_get(_replay(sc))
    assert not collided[:, :n].any()
    assert not offroad[:, :n].any()


@pytest.mark.parametrize("kind", CROSSING)
def test_scenes_have_interaction(kind):
    """Paths cross or merge (two agents' logged paths within 2 m of each other, from different
    start lanes) and someone waits (a moving agent slows below 2 m/s at some point)."""
    crossings = waits = 0
    for seed in range(2):
        raw = scene(kind, seed)
        idx = np.flatnonzero(raw.controllable)
        for a in idx:
            for b in idx[idx > a]:
                if _start_lane(raw, a) == _start_lane(raw, b):
                    continue
                d = np.linalg.norm(raw.log_xy[a][:, None] - raw.log_xy[b][None], axis=-1)
                crossings += d.min() < 2.0
            speed = np.linalg.norm(raw.log_vel[a], axis=-1)
            waits += bool(speed.min() < 2.0 and speed.max() > 4.0)
    assert crossings >= 1, f"{kind}: no crossing or merging paths"
    assert waits >= 1, f"{kind}: nobody waits"


def test_generation_is_deterministic():
    a, b = generator.generate(3, "t_junction", num_agents=6), generator.generate(3, "t_junction", num_agents=6)
    np.testing.assert_array_equal(a.log_xy, b.log_xy)
    c = generator.generate(4, "t_junction", num_agents=6)
    assert a.log_xy.shape != c.log_xy.shape or not np.allclose(a.log_xy, c.log_xy)


def test_max_objects_drops_the_last_agents_of_a_scene_that_does_not_fit():
    """narrow_passage seed 100286 parks 5 cars beside 12 agents: 17 objects, which 16 slots cannot
    build. Capped at 16 it keeps the parked cars and 11 agents and builds; a scene that fits is
    unchanged."""
    full = generator.generate(100286, "narrow_passage", 12)
    capped = generator.generate(100286, "narrow_passage", 12, max_objects=16)
    assert full.num_objects == 17 and capped.num_objects == 16
    np.testing.assert_array_equal(capped.log_xy[11:], full.log_xy[12:])  # the same 5 parked cars, last
    build_scenario(capped, types.SimConfig(max_agents=16))
    with pytest.raises(ValueError, match="17 objects > SimConfig.max_agents=16"):
        build_scenario(full, types.SimConfig(max_agents=16))
    fits = generator.generate(3, "t_junction", num_agents=6, max_objects=16)
    np.testing.assert_array_equal(fits.log_xy, generator.generate(3, "t_junction", num_agents=6).log_xy)


def test_max_road_segments_draws_a_layout_that_fits_again():
    """Highway seed 415 draws a curved 3-lane-a-side layout of more than SimConfig's 2,048 road segments;
    capped, the seed's generator draws again until one fits; a layout that fits is unchanged; the count
    is the builder's."""
    assert generator.road_segment_count(layouts.make_layout("highway", np.random.default_rng(415))) > 2048
    capped = generator._fitting_layout("highway", np.random.default_rng(415), 2048, 415)
    assert generator.road_segment_count(capped) <= 2048
    fits = generator._fitting_layout("highway", np.random.default_rng(0), 2048, 0)
    first = layouts.make_layout("highway", np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(fits.edges + fits.lanes, first.edges + first.lanes, strict=True))
    with pytest.raises(ValueError, match="highway scene of seed 415: no layout within max_road_segments=10"):
        generator._fitting_layout("highway", np.random.default_rng(415), 10, 415)
    built = build_scenario(scene("highway", 0), CFG)
    assert int(np.asarray(built.road_valid).sum()) == generator.road_segment_count(first)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown procedural kind"):
        generator.generate(0, "spaghetti_junction")


def test_densify_hits_the_target():
    raw = generator.benchmark_scene(40, 3000, seed=1)
    n_seg = sum(len(p) - 1 for p in raw.lanes) + sum(len(p) - 1 for p in raw.edges)
    n_seg += sum(len(p) - 1 for _, p in raw.others)
    assert 2700 <= n_seg <= 3300
    assert raw.num_objects == 40


def _cond_policy(p, obs, s, key):
    """Random steering; acceleration depends on the agent's goal speed (its condition)."""
    n = s.cond.shape[0]
    r = jax.random.randint(key, (n,), 0, 16)
    steer = jnp.where(r == 0, 5, jnp.where(r == 1, 7, 6))  # mostly straight, random nudges
    accel = jnp.where(s.speed < s.cond[:, 9] * 0.5, 5, 2)  # rows of the 7 x 13 grid
    return accel * 13 + steer


@functools.partial(jax.jit, static_argnums=(2,))
def _branch(state, scenario, steps):
    return env.rollout(_cond_policy, None, state, scenario, types.default_params(), CFG, steps, keep_states=True)


def test_snapshot_branches_on_a_procedural_scene():
    """40 steps, keep the state, run to the end twice with the same key (identical), once with
    another key (differs), once with another condition for one agent: that agent's path changes,
    and every agent that never came near it (in either branch) is unchanged."""
    raw = generator.generate(2, "multi_lane", num_agents=16)
    sc = build_scenario(raw, CFG)
    ctrl = jnp.where(jnp.arange(CFG.max_agents) % 2 == 0, types.POLICY, types.IDM)  # mixed traffic
    s0 = env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), CFG, ctrl)
    snap, _ = _branch(s0, sc, 40)
    assert int(jnp.sum(snap.alive & (snap.controller == types.POLICY))) >= 1
    rest = CFG.episode_steps - 40
    a, ta = _branch(snap, sc, rest)
    b, tb = _branch(snap, sc, rest)
    for x, y in zip(jax.tree.leaves((a, ta)), jax.tree.leaves((b, tb)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    c, _ = _branch(snap.replace(key=jax.random.PRNGKey(7)), sc, rest)
    assert not np.array_equal(np.asarray(c.xy), np.asarray(a.xy))

    ego = int(np.flatnonzero(np.asarray(snap.alive & (snap.controller == types.POLICY)))[0])
    d, td = _branch(snap.replace(cond=snap.cond.at[ego].set(conditions.style("aggressive"))), sc, rest)
    path_a, path_d = np.asarray(ta.state.xy), np.asarray(td.state.xy)  # [N, A, 2]
    assert np.abs(path_a[:, ego] - path_d[:, ego]).max() > 0.5
    near = np.minimum(
        np.linalg.norm(path_a - path_a[:, ego : ego + 1], axis=-1).min(0),
        np.linalg.norm(path_d - path_d[:, ego : ego + 1], axis=-1).min(0),
    )
    alive, ctrl_np = np.asarray(snap.alive), np.asarray(snap.controller)
    hit_ego = (np.asarray(a.collision_partner) == ego) | (np.asarray(d.collision_partner) == ego)
    # This policy reads only the agent's own state: other policy agents cannot react to the ego.
    others = alive & (ctrl_np == types.POLICY) & ~hit_ego
    others[ego] = False
    # IDM agents react to agents on their route up to 64 m ahead (and to predictions 2 s out):
    # those that never had the ego within 100 m cannot.
    far_idm = alive & (ctrl_np == types.IDM) & (near > 100.0)
    assert others.sum() >= 1
    np.testing.assert_array_equal(path_a[:, others | far_idm], path_d[:, others | far_idm])
    # Some agent that could react did (the branch shows interaction, not just a changed ego).
    reacted = np.abs(path_a - path_d).max(axis=(0, 2)) > 0
    reacted[ego] = False
    assert reacted.any()


def test_a_slice_of_the_scene_sequence_keeps_seeds_and_layout_kinds(monkeypatch):
    """Scene groups (PPOConfig.bank_groups) are slices of the training bank: `first` continues the
    cycle of layout kinds where the slice starts, so the groups together are the ungrouped bank."""
    from cp_jax.scenarios import bank as bank_lib
    from cp_jax.scenarios.procedural import generator

    monkeypatch.setattr(generator, "generate", lambda seed, kind, agents, **caps: (seed, kind))
    whole = bank_lib.procedural_scenes(10, 5, 3)
    parts = [bank_lib.procedural_scenes(5, 5 + g * 5, 3, first=g * 5) for g in range(2)]
    assert parts[0] + parts[1] == whole
    assert parts[1][0] != bank_lib.procedural_scenes(1, 10, 3)[0]  # without `first` the kinds restart


def test_highway_traffic_starts_at_highway_speeds():
    """A highway's agents start fast (placed at 14-22 m/s; after IDM's 2 s warm-up in traffic, median
    above 13 m/s) and stay fast to the log's end (no braking for a route end short of the road's end);
    they travel > 100 m in the 9 s log. A junction's start below 11 m/s."""
    fast, slow = scene("highway", 0), scene("four_way", 0)
    c = fast.controllable
    v0, v_end = (np.linalg.norm(fast.log_vel[c, t], axis=-1) for t in (0, -1))
    travelled = np.linalg.norm(fast.log_xy[c, -1] - fast.log_xy[c, 0], axis=-1)
    assert np.median(v0) > 13.0 and np.median(v_end) > 14.0 and travelled.min() > 100.0
    assert np.linalg.norm(slow.log_vel[slow.controllable, 0], axis=-1).max() < 11.5


def test_training_scenes_cycle_the_configured_kinds(tmp_path):
    """config.scenes.kinds sets the training bank's layout kinds (cycled by seed); unknown kinds are refused."""
    import ml_collections

    from cp_jax.jobs import scenes

    sim = types.SimConfig(max_agents=16, max_road_segments=2048, obs_road=16)
    sc = ml_collections.ConfigDict(dict(train=2, train_seed=0, eval=0, eval_seed=100_000, agents=4,
                                        cache_dir=str(tmp_path), real="", kinds=("highway", "merge")))
    sc.kinds = ()
    _, _, default = scenes.load(sc, sim)  # the default cycle, cached first in the same folder
    sc.kinds = ("highway", "merge")
    _, _, names = scenes.load(sc, sim)  # not the cached default bank: the kinds are part of the cache key
    assert default == ["four_way_0", "t_junction_1"] and names == ["highway_0", "merge_1"]
    sc.kinds = ("highway", "motorway")
    with pytest.raises(ValueError, match=r"config.scenes.kinds: unknown layout kinds \['motorway'\]"):
        scenes.check(sc)
