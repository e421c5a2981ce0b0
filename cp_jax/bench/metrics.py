"""Per-episode benchmark metrics: outcome, the at-fault collision classifier, sub-scores and score.

One benchmark episode is recorded as an `EpisodeRecord`: rows t = 0..T (T1 = T + 1) of every
agent's pose, speed, alive flag and accelerations, where row t is SimState t (row 0 the reset state,
row t the state after `env.step` number t, the last row the final state), plus the final event
bookkeeping. Event times follow `env.step`: an event of the step from state t - 1 to state t is
stamped t, so row `first_collision_t` is the first state in which the two boxes overlap. The agent
removed by the event is no longer `alive` in that row, but its pose, speed and accelerations there
are the post-step values of the colliding step.

All functions are pure and jit / vmap safe (`cfg`, a `SimConfig`, is static; `ego` may be traced).

At-fault classifier (`at_fault`; nuPlan-style rules of BehaviorBench, the ego's FIRST collision
only, False when it never collided). Everything is measured in the collision row c, ego e and
partner p = `collision_partner[e]`; the first rule that applies decides:
1. stopped ego: not at fault;
2. stopped partner: at fault;
3. partner a pedestrian or cyclist (`Scenario.obj_type`): at fault;
4. partner behind, bearing > 150 deg (rear-ended): at fault only if the ego is changing lanes;
5. partner in front, bearing < 60 deg and closing speed > 0.5 m/s: at fault;
6. otherwise (lateral, or in front but not closing): at fault only if the ego is changing lanes.
(With one "changing lanes" test for both, rules 4 and 6 agree; rule 4 only keeps rear contacts out
of rule 5, which their bearing already does. Both are written out to mirror the published rules.)
Stopped: |speed| < 0.05 m/s both in row c and in row c-1, i.e. before and after the colliding step
(an agent braking to a halt in the very step it hits something is not stopped). Bearing: the angle
between the ego's heading and the vector from the ego's centre to the partner's centre, in
[0, 180] deg (from the heading, not the direction of travel: an ego reversing into an agent behind
it counts as rear-ended). Closing speed: the rate at which the centre distance shrinks,
-d . (v_p - v_e) / |d| with d = xy_p - xy_e and v = speed * (cos yaw, sin yaw) in row c.
"Changing lanes" (rules 4 and 6) = straddling AND drifting, both in row c:
- straddling ("overlaps two lanes"): the ego's box reaches over a boundary of its nearest lane,
  |x| + h > LANE_WIDTH / 2, with x the lateral offset from the nearest lane centreline
  (`geometry.lane_frame`), h = (width |cos th| + length |sin th|) / 2 the box's half extent across
  that lane (th the heading error to it), and LANE_WIDTH = 3.7 m assumed for every lane (the scenes
  carry no lane widths). No lane near the ego: not straddling.
- drifting: the ego's last DRIFT_POSITIONS = 4 centres (rows c-3..c, clipped at row 0) spread over
  more than 0.3 m across the lane, i.e. max - min of their projections on the normal of the
  nearest lane in row c (the ego's own heading when no lane is found). One fixed normal is used
  so that the nearest lane switching mid-change does not make the offset jump.
A collision with no recorded partner (impossible with `env.step`) skips rules 2-5.

Sub-scores in [0, 1] over the ego's driven steps: step t (1..T) is driven when the ego was alive in
row t-1, i.e. it moved in that step (the removing step included, steps after removal not):
- comfort = 1 - the share of driven steps with a comfort violation, the reward's comfort events:
  |accel| > 3 m/s^2, |lat_accel| > 3 m/s^2, or a jerk |d accel / dt| > 5 m/s^3 in either axis
  (row t against row t-1; row 0 holds the reset's zero accelerations, as in the reward);
- lane_align = mean of clip(1 - |th| / 90 deg, 0, 1): 1 along the lane, 0 at 90 deg or worse;
- lane_center = mean of clip(1 - |x| / (LANE_WIDTH / 2), 0, 1): 1 on the centreline, 0 at the
  (assumed) lane boundary or beyond;
th and x from `geometry.lane_frame` in row t; lane_align and lane_center average the driven steps
with a lane nearby only. With no such step a sub-score is 1 (nothing to penalise).
mean_speed (m/s, not a score) = mean |speed| of the ego in rows t over its driven steps (0 with no
driven step; `ppo.evaluate`'s self-play speed averages the rows before each step instead): with the
outcomes it shows what an ego style changes (Table IV).

`episode_metrics` returns float32 scalars (0/1 for the flags), so means over episodes are rates:
goal, timeout, collision, offroad = the ego's outcome by first event (`cp_jax.sim.metrics.outcomes`:
a collision and an off-road in the same step count as a collision); at_fault / non_at_fault split
the collision outcome by `at_fault`, so goal + timeout + at_fault + non_at_fault + offroad = 1;
clean = the goal was reached and the ego never collided nor went off-road; and
score = 100 * clean * mean(comfort, lane_align, lane_center), the per-episode score whose mean over
episodes is the benchmark score (DESIGN.md section 7, our reconstruction).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from cp_jax.sim import geometry, types
from cp_jax.sim import metrics as sim_metrics
from cp_jax.sim.reward import comfort_violations  # the reward's comfort rule
from cp_jax.sim.types import INF_T, Scenario, SimConfig, SimState

__all__ = [
    "EpisodeRecord", "record_from_states", "collision_features", "RULES", "ALWAYS_AT_FAULT",
    "AT_FAULT_IF_CHANGING", "fault_rule", "at_fault", "at_fault_in",
    "changing_lanes", "subscores", "episode_metrics", "METRIC_KEYS", "LANE_WIDTH",
]

LANE_WIDTH = 3.7  # m, assumed for every lane (the scenes carry no lane widths)
STOP_SPEED = 0.05  # m/s: below this an agent is stopped
REAR_BEARING = 150.0  # deg: partner behind the ego beyond this bearing
FRONT_BEARING = 60.0  # deg: partner in front of the ego below this bearing
CLOSING_SPEED = 0.5  # m/s: a frontal collision needs at least this closing speed
DRIFT = 0.3  # m of lateral spread over the last DRIFT_POSITIONS centres
DRIFT_POSITIONS = 4

METRIC_KEYS = (
    "goal", "timeout", "collision", "at_fault", "non_at_fault", "offroad",
    "comfort", "lane_align", "lane_center", "mean_speed", "clean", "score",
)


@struct.dataclass
class EpisodeRecord:
    """One episode (vmap adds leading axes). Row t = SimState t, t = 0..T (T1 = T + 1 rows)."""

    xy: jax.Array  # [T1, A, 2] agent centre
    yaw: jax.Array  # [T1, A]
    speed: jax.Array  # [T1, A] signed speed m/s
    alive: jax.Array  # [T1, A] bool: in the world in that state
    accel: jax.Array  # [T1, A] longitudinal acceleration of the step into that state
    lat_accel: jax.Array  # [T1, A] lateral acceleration of the step into that state
    goal_t: jax.Array  # [A] int32 row of the first goal (INF_T: never), from the final state
    first_collision_t: jax.Array  # [A] int32
    first_offroad_t: jax.Array  # [A] int32
    collision_partner: jax.Array  # [A] int32 agent hit at the first collision (-1: none)


def record_from_states(states: SimState, final: SimState) -> EpisodeRecord:
    """The record of an episode from every state [T1, ...] (row t must be state t, so the episode
    starts at t = 0; e.g. `env.stack_states(traj.state, final)`) and the final state (event times)."""
    return EpisodeRecord(
        xy=states.xy,
        yaw=states.yaw,
        speed=states.speed,
        alive=states.alive,
        accel=states.accel,
        lat_accel=states.lat_accel,
        goal_t=final.goal_t,
        first_collision_t=final.first_collision_t,
        first_offroad_t=final.first_offroad_t,
        collision_partner=final.collision_partner,
    )


def _velocity(speed: jax.Array, yaw: jax.Array) -> jax.Array:
    return speed[..., None] * jnp.stack([jnp.cos(yaw), jnp.sin(yaw)], -1)


def changing_lanes(rec: EpisodeRecord, scenario: Scenario, ego: jax.Array, row: jax.Array, cfg: SimConfig):
    """(straddling [] bool, drift [] m) of the ego in row `row` (see the module docstring);
    the ego is changing lanes when straddling and drift > DRIFT."""
    t1 = rec.xy.shape[0]
    row = jnp.clip(row, 0, t1 - 1)
    xy, yaw = rec.xy[row, ego], rec.yaw[row, ego]
    heading_err, lateral, _, found = geometry.lane_frame(xy[None], yaw[None], scenario, cfg)
    heading_err, lateral, found = heading_err[0], lateral[0], found[0]
    length, width = scenario.size[ego, 0], scenario.size[ego, 1]
    half = 0.5 * (width * jnp.abs(jnp.cos(heading_err)) + length * jnp.abs(jnp.sin(heading_err)))
    straddling = found & (jnp.abs(lateral) + half > 0.5 * LANE_WIDTH)
    lane_yaw = yaw - jnp.where(found, heading_err, 0.0)
    normal = jnp.stack([-jnp.sin(lane_yaw), jnp.cos(lane_yaw)])
    rows = jnp.clip(row - jnp.arange(DRIFT_POSITIONS), 0, t1 - 1)
    across = (rec.xy[rows, ego] - xy) @ normal  # [DRIFT_POSITIONS]
    return straddling, jnp.max(across) - jnp.min(across)


def collision_features(rec: EpisodeRecord, scenario: Scenario, ego: jax.Array, cfg: SimConfig) -> dict:
    """What `at_fault` reads, as scalars (meaningful when `collided`): collided, row, partner,
    ego_speed, partner_speed (row c), ego_stopped, partner_stopped, partner_vru (pedestrian /
    cyclist), bearing (deg), closing (m/s), straddling, drift (m)."""
    c_t = rec.first_collision_t[ego]
    collided = c_t < INF_T
    row = jnp.clip(c_t, 0, rec.xy.shape[0] - 1)
    partner = rec.collision_partner[ego]
    p = jnp.maximum(partner, 0)
    e_xy, e_yaw, e_v = rec.xy[row, ego], rec.yaw[row, ego], rec.speed[row, ego]
    p_xy, p_yaw, p_v = rec.xy[row, p], rec.yaw[row, p], rec.speed[row, p]
    rel = geometry.to_frame(p_xy, e_xy, e_yaw)
    bearing = jnp.degrees(jnp.abs(jnp.arctan2(rel[1], rel[0])))
    d = p_xy - e_xy
    closing = -jnp.dot(d, _velocity(p_v, p_yaw) - _velocity(e_v, e_yaw)) / jnp.maximum(jnp.linalg.norm(d), 1e-6)
    straddling, drift = changing_lanes(rec, scenario, ego, row, cfg)
    p_type = scenario.obj_type[p]
    before = jnp.maximum(row - 1, 0)
    stopped = lambda i: jnp.maximum(jnp.abs(rec.speed[row, i]), jnp.abs(rec.speed[before, i])) < STOP_SPEED  # noqa: E731
    return dict(
        collided=collided, row=row, partner=partner, ego_speed=e_v, partner_speed=p_v,
        ego_stopped=stopped(ego), partner_stopped=stopped(p),
        partner_vru=(p_type == types.PEDESTRIAN) | (p_type == types.CYCLIST),
        bearing=bearing, closing=closing, straddling=straddling, drift=drift,
    )


RULES = ("stopped ego", "stopped partner", "pedestrian / cyclist", "rear-ended", "into a moving partner ahead",
         "lateral or not closing")  # rules 1-6 of the module docstring, as `fault_rule` numbers them (0-5)
ALWAYS_AT_FAULT, AT_FAULT_IF_CHANGING = (1, 2, 4), (3, 5)  # fault_rule numbers; rule 0 never at fault


def fault_rule(f: dict) -> tuple[jax.Array, jax.Array]:
    """(rule [] int32 in 0..5, the index into RULES of the first rule that applies; changing lanes [] bool)
    for `collision_features` f. Rule 0 is never at fault; 1, 2 and 4 always; 3 and 5 when changing lanes."""
    has_partner = f["partner"] >= 0
    changing = f["straddling"] & (f["drift"] > DRIFT)
    rear = has_partner & (f["bearing"] > REAR_BEARING)
    frontal = has_partner & (f["bearing"] < FRONT_BEARING) & (f["closing"] > CLOSING_SPEED)
    rule = jnp.select([f["ego_stopped"], has_partner & f["partner_stopped"], has_partner & f["partner_vru"],
                       rear, frontal], [0, 1, 2, 3, 4], 5)
    return rule.astype(jnp.int32), changing


def at_fault(rec: EpisodeRecord, scenario: Scenario, ego: jax.Array, cfg: SimConfig) -> jax.Array:
    """[] bool: the ego is at fault for its first collision (False when it never collided).
    The rules, in priority order, are in the module docstring (`fault_rule` says which decided)."""
    f = collision_features(rec, scenario, ego, cfg)
    rule, changing = fault_rule(f)
    verdict = jnp.isin(rule, jnp.array(ALWAYS_AT_FAULT)) | (jnp.isin(rule, jnp.array(AT_FAULT_IF_CHANGING)) & changing)
    return f["collided"] & verdict


def at_fault_in(states: SimState, final: SimState, scenario: Scenario, agent: jax.Array, cfg: SimConfig) -> jax.Array:
    """`at_fault` of agent [] in the episode of states [T + 1, ...] (`env.stack_states`) ending in final:
    the classifier `cp_jax.rl.evaluate.evaluate(..., classify=at_fault_in)` applies to every agent."""
    return at_fault(record_from_states(states, final), scenario, agent, cfg)


def subscores(rec: EpisodeRecord, scenario: Scenario, ego: jax.Array, cfg: SimConfig) -> dict[str, jax.Array]:
    """comfort, lane_align, lane_center [] in [0, 1] of the ego over its driven steps (module docstring)."""
    driven = rec.alive[:-1, ego]  # [T]: step t = 1..T moved the ego
    accel, lat = rec.accel[:, ego], rec.lat_accel[:, ego]  # [T1]
    jerk_long, jerk_lat = jnp.diff(accel) / cfg.dt, jnp.diff(lat) / cfg.dt
    violation = jnp.any(comfort_violations(accel[1:], lat[1:], jerk_long, jerk_lat), -1)
    heading_err, lateral, _, found = geometry.lane_frame(rec.xy[1:, ego], rec.yaw[1:, ego], scenario, cfg)
    align = jnp.clip(1.0 - jnp.abs(heading_err) / (0.5 * jnp.pi), 0.0, 1.0)
    center = jnp.clip(1.0 - jnp.abs(lateral) / (0.5 * LANE_WIDTH), 0.0, 1.0)

    def mean(x, mask):
        n = jnp.sum(mask)
        return jnp.where(n > 0, jnp.sum(jnp.where(mask, x, 0.0)) / jnp.maximum(n, 1), 1.0)

    on_lane = driven & found
    return {
        "comfort": 1.0 - mean(violation.astype(jnp.float32), driven),
        "lane_align": mean(align, on_lane),
        "lane_center": mean(center, on_lane),
    }


def episode_metrics(rec: EpisodeRecord, scenario: Scenario, ego: jax.Array, cfg: SimConfig) -> dict[str, jax.Array]:
    """METRIC_KEYS -> float32 [] for the ego of one episode (definitions in the module docstring)."""
    # sim_metrics.outcomes reads only goal_t / first_collision_t / first_offroad_t, which the record shares.
    out = {k: v[ego] for k, v in sim_metrics.outcomes(rec).items()}
    fault = at_fault(rec, scenario, ego, cfg)
    clean = (
        (rec.goal_t[ego] < INF_T) & (rec.first_collision_t[ego] == INF_T) & (rec.first_offroad_t[ego] == INF_T)
    )
    sub = subscores(rec, scenario, ego, cfg)
    driven = rec.alive[:-1, ego]
    speed = jnp.sum(jnp.where(driven, jnp.abs(rec.speed[1:, ego]), 0.0)) / jnp.maximum(jnp.sum(driven), 1)
    flags = dict(
        goal=out["goal"], timeout=out["timeout"], collision=out["collision"],
        at_fault=out["collision"] & fault, non_at_fault=out["collision"] & ~fault,
        offroad=out["offroad"], clean=clean,
    )
    metrics = {k: v.astype(jnp.float32) for k, v in flags.items()}
    metrics.update(sub, mean_speed=speed)
    mean_sub = (sub["comfort"] + sub["lane_align"] + sub["lane_center"]) / 3.0
    metrics["score"] = 100.0 * metrics["clean"] * mean_sub
    return {k: metrics[k] for k in METRIC_KEYS}
