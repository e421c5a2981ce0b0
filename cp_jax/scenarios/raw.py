"""`RawScene`: a scene as ragged numpy data, before padding to static sizes.

Every source of scenes (the procedural generator, the JSON and tf.Example readers) produces a
RawScene; `cp_jax.scenarios.builder.build_scenario` validates it and pads it into a `Scenario`.

Conventions:
- Metres, radians, world frame. Log step dt = 0.1 s.
- Road-edge polylines keep the drivable area on their LEFT (counter-clockwise around the road),
  as in the Waymo Open Motion Dataset. A point to the right of the nearest edge is off-road.
- Lane ids are indices into `lanes`. The lane graph is `lane_succ` (lane -> lanes that continue
  it), `lane_left` / `lane_right` (-1 for none).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class RawScene:
    name: str
    # Road network.
    lanes: list[np.ndarray]  # per lane, centreline polyline [n_i, 2], n_i >= 2, in driving direction
    lane_succ: list[list[int]]  # per lane, successor lane ids
    lane_left: list[int]  # per lane, left neighbour lane id or -1
    lane_right: list[int]  # per lane, right neighbour lane id or -1
    edges: list[np.ndarray]  # road-edge polylines [n_i, 2], drivable area on the left
    others: list[tuple[int, np.ndarray]]  # (ROAD_TYPES id, polyline [n_i, 2]): lines, crosswalks...
    # Objects (N of them) over T log steps.
    log_xy: np.ndarray  # [N, T, 2]
    log_yaw: np.ndarray  # [N, T]
    log_vel: np.ndarray  # [N, T, 2]
    log_valid: np.ndarray  # [N, T] bool
    size: np.ndarray  # [N, 2] (length, width)
    obj_type: np.ndarray  # [N] int, OBJECT_TYPES id
    goal: np.ndarray  # [N, 2]
    controllable: np.ndarray  # [N] bool
    routes: list[list[int]]  # per object, lane ids start -> goal along the lane graph ([]: none; the
    # builder then routes a controllable object along its logged path, `builder.log_route`)
    priority: np.ndarray | None = None  # [N] int, lower = right of way; None -> zeros
    tl_state: np.ndarray | None = None  # [n_lanes, T] int TL_* per lane; None -> no lights
    sdc: int = 0
    object_ids: np.ndarray | None = None  # [N] int, each object's id in its source file (None: its index)

    @property
    def num_objects(self) -> int:
        return int(self.log_xy.shape[0])

    @property
    def num_steps(self) -> int:
        return int(self.log_xy.shape[1])
