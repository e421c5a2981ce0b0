"""Datatypes of the simulator: a static config, the scene, the dynamic state, outputs.

Shapes use A = max_agents, C = SimConfig.num_controlled, S = max_road_segments, L = max_lanes, T = log_steps,
R = max_route_points, G2 = grid_size**2, K = obs_partners, k = obs_road.
Everything except `SimConfig` is a pytree of arrays; leading batch dimensions come from vmap.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

INF_T = 1_000_000  # "never" for event times (goal_t, first_collision_t, ...)

# Controller ids (SimState.controller).
POLICY, LOG, CONST_VEL, IDM, OTHER_POLICY = 0, 1, 2, 3, 4
CONTROLLER_NAMES = ("policy", "log", "const_vel", "idm", "other_policy")

# Object types (Scenario.obj_type).
VEHICLE, PEDESTRIAN, CYCLIST, OTHER_OBJECT = 0, 1, 2, 3
OBJECT_TYPES = ("vehicle", "pedestrian", "cyclist", "other")

# Road segment types (Scenario.road_type); 7 kinds, one-hot in the network.
LANE, ROAD_EDGE, ROAD_LINE, CROSSWALK, STOP_SIGN, SPEED_BUMP, DRIVEWAY = range(7)
ROAD_TYPES = ("lane", "road_edge", "road_line", "crosswalk", "stop_sign", "speed_bump", "driveway")

# Traffic-light states (Scenario.tl_state).
TL_NONE, TL_STOP, TL_CAUTION, TL_GO = 0, 1, 2, 3

COND_DIM = 10
COND_FIELDS = (
    "goal_radius", "alpha_coll", "alpha_bnd", "alpha_comfort", "alpha_l_align",
    "alpha_vel_align", "alpha_l_center", "alpha_center_bias", "alpha_reverse", "goal_speed",
)
EGO_DIM, PARTNER_DIM, ROAD_DIM = 9, 8, 7  # ego: BehaviorBench's 7 + previous accel, steer


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Static sizes and modes. Hashable: one compiled program per config."""

    max_agents: int = 32
    max_road_segments: int = 2048
    max_lanes: int = 64
    max_lane_successors: int = 4
    max_route_points: int = 96
    route_spacing: float = 2.0  # metres between route points
    log_steps: int = 91
    episode_steps: int = 90  # number of step() calls until truncation
    dt: float = 0.1
    obs_partners: int = 31
    obs_road: int = 128
    partner_radius: float = 50.0
    grid_size: int = 32  # cells per side of the road index
    cell_edges: int = 24  # road-edge candidates kept per cell (off-road test)
    cell_lanes: int = 16  # lane candidates kept per cell (reward's lane terms)
    discrete_actions: bool = True
    remove_on_event: bool = True  # False: "keep driving" after a collision / off-road
    enable_idm: bool = True  # False compiles the IDM controller out of step()
    idm_lookahead: int = 32  # route points ahead scanned for leaders (x route_spacing metres)
    # Agent slots per scene that may be driven by anything but the log (policy, IDM, constant
    # velocity, other policy). None = max_agents: every slot, events for all pairs (the reference).
    # Smaller: `reset` keeps the first max_controlled non-log agents (index order) and replays the
    # others' logs, and `step` checks events / computes rewards for those rows only (see env.step).
    max_controlled: int | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        positive_ints = (
            "max_agents", "max_road_segments", "max_lanes", "max_lane_successors",
            "max_route_points", "log_steps", "episode_steps", "obs_partners", "obs_road",
            "grid_size", "cell_edges", "cell_lanes", "idm_lookahead",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SimConfig.{name} must be a positive int, got {value!r}")
        for name in ("dt", "partner_radius", "route_spacing"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SimConfig.{name} must be > 0, got {value!r}")
        if self.episode_steps > self.log_steps - 1:
            raise ValueError(
                f"SimConfig.episode_steps ({self.episode_steps}) must be <= log_steps - 1 ({self.log_steps - 1})"
            )
        if self.obs_road > self.max_road_segments:
            raise ValueError(
                f"SimConfig.obs_road ({self.obs_road}) must be <= max_road_segments "
                f"({self.max_road_segments})"
            )
        for name in ("cell_edges", "cell_lanes"):
            if getattr(self, name) > self.max_road_segments:
                raise ValueError(f"SimConfig.{name} must be <= max_road_segments")
        if self.idm_lookahead > self.max_route_points:
            raise ValueError("SimConfig.idm_lookahead must be <= max_route_points")
        c = self.max_controlled
        if c is not None and (not isinstance(c, int) or isinstance(c, bool) or not 1 <= c <= self.max_agents):
            raise ValueError(
                f"SimConfig.max_controlled must be None or an int in 1..max_agents ({self.max_agents}), got {c!r}"
            )

    @property
    def num_cells(self) -> int:
        return self.grid_size * self.grid_size

    @property
    def num_controlled(self) -> int:
        """C: length of SimState.ctrl_rows (max_controlled, or max_agents when None)."""
        return self.max_agents if self.max_controlled is None else self.max_controlled

    @property
    def rows_only(self) -> bool:
        """True when step computes events and rewards for the C rows of ctrl_rows only (C < A)."""
        return self.num_controlled < self.max_agents


@struct.dataclass
class Scenario:
    """One padded scene. Static over an episode; invalid entries are masked, never dropped."""

    # Road network, as straight segments.
    road_xy0: jax.Array  # [S, 2] segment start
    road_xy1: jax.Array  # [S, 2] segment end
    road_tan0: jax.Array  # [S, 2] unit tangent bisector at the start vertex (sign of distance)
    road_tan1: jax.Array  # [S, 2] unit tangent bisector at the end vertex
    road_type: jax.Array  # [S] int32, ROAD_TYPES
    road_lane: jax.Array  # [S] int32 lane id for LANE segments, -1 otherwise
    road_valid: jax.Array  # [S] bool
    road_feat: jax.Array  # [S, 6] world-frame (mid x, mid y, length, cos, sin, type): one row per gather
    # Lane graph.
    lane_succ: jax.Array  # [L, max_lane_successors] int32, -1 padded
    lane_left: jax.Array  # [L] int32 left neighbour lane, -1 none
    lane_right: jax.Array  # [L] int32 right neighbour lane, -1 none
    lane_valid: jax.Array  # [L] bool
    tl_state: jax.Array  # [L, T] int32 TL_* for the lane's entry at each log step
    # Objects.
    log_xy: jax.Array  # [A, T, 2]
    log_yaw: jax.Array  # [A, T] radians
    log_vel: jax.Array  # [A, T, 2]
    log_valid: jax.Array  # [A, T] bool
    size: jax.Array  # [A, 2] (length, width) metres
    obj_type: jax.Array  # [A] int32, OBJECT_TYPES
    agent_valid: jax.Array  # [A] bool: a real object in this slot
    controllable: jax.Array  # [A] bool: may be driven by a policy / IDM
    goal: jax.Array  # [A, 2]
    sdc: jax.Array  # [] int32 index of the self-driving car (ego by default)
    # Routes along the lane graph, resampled every route_spacing metres (for IDM).
    route_xy: jax.Array  # [A, R, 2]
    route_lane: jax.Array  # [A, R] int32 lane of each point; -1 on a route built from the logged path
    route_len: jax.Array  # [A] int32 number of valid route points
    priority: jax.Array  # [A] int32, lower = right of way (IDM yielding)
    # Spatial index, built once per scene (cp_jax.sim.geometry.build_road_index).
    grid_origin: jax.Array  # [2] lower-left corner
    grid_cell: jax.Array  # [] cell side in metres
    cell_edges: jax.Array  # [G2, cell_edges] int32 road-edge segment ids nearest the cell, -1 pad
    cell_lanes: jax.Array  # [G2, cell_lanes] int32 lane segment ids nearest the cell, -1 pad
    cell_road: jax.Array  # [G2, obs_road] int32 segment ids nearest the cell centre, -1 pad


@struct.dataclass
class SimState:
    """Everything needed to resume a rollout exactly. A snapshot is this pytree."""

    t: jax.Array  # [] int32 step index (log frame of the current poses)
    xy: jax.Array  # [A, 2]
    yaw: jax.Array  # [A]
    speed: jax.Array  # [A] signed, along the heading
    accel: jax.Array  # [A] last longitudinal acceleration (policy agents: the actuator's)
    steer: jax.Array  # [A] policy agents' steering position in command units (dynamics.actuate), else 0
    lat_accel: jax.Array  # [A] last lateral acceleration (for jerk)
    route_s: jax.Array  # [A] arc length along the route (IDM)
    alive: jax.Array  # [A] bool: in the world now
    removed: jax.Array  # [A] bool: taken out by an event (goal, collision, off-road)
    goal_t: jax.Array  # [A] int32, INF_T if not reached
    first_collision_t: jax.Array  # [A] int32
    first_offroad_t: jax.Array  # [A] int32
    collision_partner: jax.Array  # [A] int32, -1 none (partner of the first collision)
    cond: jax.Array  # [A, COND_DIM] reward condition
    controller: jax.Array  # [A] int32 controller id
    # [C] int32 agent indices: every non-LOG agent (index order), then LOG agents as padding (all
    # distinct). With C < A, step checks events and computes rewards for these rows only; set by
    # reset, and by env.set_controllers when controllers change afterwards.
    ctrl_rows: jax.Array
    key: jax.Array  # PRNG key driving everything stochastic from here on


@struct.dataclass
class StepOut:
    """Per-agent results of one step."""

    reward: jax.Array  # [A]
    terminated: jax.Array  # [A] bool: removed this step by goal / collision / off-road
    truncated: jax.Array  # [A] bool: alive at the time limit
    collided: jax.Array  # [A] bool: overlapping another alive agent after the step
    offroad: jax.Array  # [A] bool
    at_goal: jax.Array  # [A] bool
    active: jax.Array  # [A] bool: alive before the step (the reward is meaningful)


@struct.dataclass
class Obs:
    """Ego-centric observation of every agent (rows of invalid agents are zero)."""

    ego: jax.Array  # [A, EGO_DIM]: 7 BehaviorBench features + previous accel, steer
    cond: jax.Array  # [A, 10] in [-1, 1]
    partners: jax.Array  # [A, K, 8]
    partner_mask: jax.Array  # [A, K] bool
    road: jax.Array  # [A, k, 7]
    road_mask: jax.Array  # [A, k] bool

    def flat(self) -> jax.Array:
        """[A, EGO_DIM + 10 + K*9 + k*8] one vector per agent (features then masks)."""
        a = self.ego.shape[:-1]
        return jnp.concatenate(
            [
                self.ego,
                self.cond,
                self.partners.reshape(*a, -1),
                self.partner_mask.astype(self.ego.dtype),
                self.road.reshape(*a, -1),
                self.road_mask.astype(self.ego.dtype),
            ],
            axis=-1,
        )


@struct.dataclass
class IDMParams:
    """Intelligent Driver Model parameters (arrays, so they can change without recompiling)."""

    desired_speed: jax.Array  # [] or [A] m/s
    min_gap: jax.Array  # m
    headway: jax.Array  # s
    max_accel: jax.Array  # m/s^2
    comfort_decel: jax.Array  # m/s^2
    delta: jax.Array  # acceleration exponent


@struct.dataclass
class SimParams:
    """Tunable simulator values (arrays). Made by default_params, which checks them (PARAM_RULES, odd
    grids with 0 in the middle); validate_params checks one put together otherwise."""

    idm: IDMParams
    wheelbase_frac: jax.Array  # wheelbase = frac * length
    max_speed: jax.Array  # m/s, forward limit
    max_reverse: jax.Array  # m/s, reverse limit (>= 0; 0: no reverse gear, braking stops the car)
    accel_grid: jax.Array  # [7] discrete accelerations m/s^2
    steer_grid: jax.Array  # [13] discrete steering commands (rad at low speed)
    # Actuator (dynamics.actuate): first-order lag of accel and steering towards the command
    # (1 = immediate), and the lateral acceleration that full steering lock reaches at speed.
    actuator_lag: jax.Array
    max_lat_accel: jax.Array  # m/s^2 (inf: steering is never scaled down)


IDM_DEFAULTS = dict(desired_speed=15.0, min_gap=1.0, headway=1.5, max_accel=1.0, comfort_decel=3.0, delta=4.0)

# What SimParams accepts, field by field: (field, ok(values [...]) -> bool [...], the allowed values). NaN
# fails every rule. Checked where the values come from Python (default_params, validate_params), never
# under jit.
PARAM_RULES = (
    ("wheelbase_frac", lambda v: (v > 0) & (v <= 1), "in (0, 1]"),
    ("max_speed", lambda v: v > 0, "> 0 m/s"),
    ("max_reverse", lambda v: v >= 0, ">= 0 m/s (0: no reverse gear)"),
    ("actuator_lag", lambda v: (v > 0) & (v <= 1),
     "in (0, 1] (1: the command at once; 0 would freeze the actuator: no control)"),
    ("max_lat_accel", lambda v: v > 0,
     "> 0 m/s^2 (inf: steering never scaled down; <= 0 would disable or reverse the steering)"),
    ("idm.desired_speed", lambda v: v >= 0, ">= 0 m/s"),
    ("idm.min_gap", lambda v: v >= 0, ">= 0 m"),
    ("idm.headway", lambda v: v >= 0, ">= 0 s"),
    ("idm.max_accel", lambda v: v > 0, "> 0 m/s^2"),
    ("idm.comfort_decel", lambda v: v > 0, "> 0 m/s^2"),
    ("idm.delta", lambda v: v > 0, "> 0"),
)


def _check_grid(name: str, grid: np.ndarray) -> None:
    """An action grid [n]: odd n >= 3, increasing, exactly 0 in the middle (the keep-driving action is
    the middle index: env.rollout, rl/bc.py)."""
    n = grid.shape[0] if grid.ndim == 1 else 0
    if n < 3 or n % 2 == 0 or not np.all(np.diff(grid) > 0) or grid[n // 2] != 0:
        raise ValueError(f"SimParams.{name} must be increasing with an odd length >= 3 and 0 in the middle (the "
                         f"keep-driving action), got {np.round(grid, 4).tolist()}")


def _check_values(values: dict) -> None:
    """values {field or 'idm.field': array-like} (those present) against PARAM_RULES and the grids; raises
    ValueError naming the first bad field and its allowed values."""
    for name, ok, allowed in PARAM_RULES:
        if name not in values:
            continue
        v = np.asarray(values[name], np.float64)
        if not np.all(ok(v)):
            raise ValueError(f"SimParams.{name} must be {allowed}, got {v.tolist()}")
    for name in ("accel_grid", "steer_grid"):
        if name in values:
            _check_grid(name, np.asarray(values[name], np.float64))


def validate_params(params: SimParams) -> SimParams:
    """params, after checking every value (module rules: PARAM_RULES, the grids); raises ValueError naming
    the field. Needs concrete arrays: call it where a SimParams is put together, not under jit."""
    values = {k: getattr(params, k) for k in ("wheelbase_frac", "max_speed", "max_reverse", "accel_grid",
                                              "steer_grid", "actuator_lag", "max_lat_accel")}
    values.update({f"idm.{k}": getattr(params.idm, k) for k in IDM_DEFAULTS})
    _check_values(jax.device_get(values))
    return params


def default_idm(**overrides) -> IDMParams:
    """BehaviorBench's IDM regime values (IDM_DEFAULTS), overrides applied; unknown or out-of-range
    values raise ValueError naming the field."""
    unknown = set(overrides) - set(IDM_DEFAULTS)
    if unknown:
        raise ValueError(f"IDMParams: unknown field(s) {sorted(unknown)}; known: {list(IDM_DEFAULTS)}")
    values = {**IDM_DEFAULTS, **overrides}
    _check_values({f"idm.{k}": v for k, v in values.items()})
    return IDMParams(**{k: jnp.asarray(v, jnp.float32) for k, v in values.items()})


def _grid(limit: float, n: int, name: str) -> np.ndarray:
    """linspace(-limit, limit, n) [n] with an exact 0 in the middle; n (argument `name`) an odd int >= 3."""
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 3 or n % 2 == 0:
        raise ValueError(f"default_params: {name} must be an odd int >= 3 (the middle action is 0: keep "
                         f"driving), got {n!r}")
    values = np.linspace(-limit, limit, n)
    return np.where(np.abs(values) < 1e-9, 0.0, values)


def default_params(
    num_accel: int = 7, num_steer: int = 13, actuator_lag: float = 0.3, max_lat_accel: float = 8.0,
    max_reverse: float = 5.0, max_brake: float = 8.0, **idm_overrides
) -> SimParams:
    """Default values: accel in linspace(-4, 4, 7) m/s^2 with its lowest value an emergency brake of
    -max_brake (-8, -2.67, -1.33, 0, 1.33, 2.67, 4), steer in linspace(-1, 1, 13) rad; the actuator
    follows commands with lag 0.3 per step and full lock reaches at most 8 m/s^2 lateral
    (`actuator_lag=1, max_lat_accel=inf`: the classic bicycle driven directly by the command).

    Why the emergency brake (since session 33; max_brake=4 is the plain grid every policy before b80
    was trained on): with -4 m/s^2 through the actuator's lag a policy could not stop for a goal or a
    queue ahead at highway speeds that the IDM driver (8 m/s^2, no lag) and real cars (~8-9 m/s^2)
    manage; fine-tuned with it, the anchor's real-road off-road rate fell from 6.2 / 4.0 / 5.1% to
    2.3 / 2.3 / 1.7% (docs/measurements/real_scenes.md, b80).
    Every value is checked (PARAM_RULES; odd grids with 0 in the middle); a bad one raises ValueError
    naming it and its allowed values.

    Why the actuator: the comfort term penalises |jerk| > 5 m/s^3, and with direct commands on
    this grid every change of action is such a jerk (1.33 m/s^2 or 1/6 rad in 0.1 s). With lag 0.3
    a change of one grid step is a jerk of 4 m/s^3 (both axes), two or more steps still count.

    max_reverse: the reverse limit (m/s); 0 = no reverse gear, braking stops the car and holds it.
    Either way the actuator's state follows what the car did where a limit clipped the speed
    (`dynamics.settle`). The default keeps a reverse gear: without one, self-play PPO settled into
    standing still (docs/log/anchor_runs.csv, run b5: 0.2 training goal rate at 2.7 M steps vs 0.6 with it).
    """
    if not (isinstance(max_brake, int | float) and 4.0 <= max_brake <= 20.0):
        raise ValueError(f"default_params: max_brake must be in [4, 20] m/s^2 (4: the plain grid, no emergency "
                         f"brake), got {max_brake!r}")
    accel = _grid(4.0, num_accel, "num_accel")
    accel[0] = -float(max_brake)
    values = dict(wheelbase_frac=0.6, max_speed=40.0, max_reverse=max_reverse,
                  accel_grid=accel, steer_grid=_grid(1.0, num_steer, "num_steer"),
                  actuator_lag=actuator_lag, max_lat_accel=max_lat_accel)
    _check_values(values)
    return SimParams(idm=default_idm(**idm_overrides), **{k: jnp.asarray(v, jnp.float32) for k, v in values.items()})
