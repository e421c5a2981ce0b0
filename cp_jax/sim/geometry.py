"""Geometry: oriented boxes, separating-axis overlap, segment distances, the road grid index."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from cp_jax.sim import types


def rotate(xy: jax.Array, yaw: jax.Array) -> jax.Array:
    """Rotate vectors [..., 2] by yaw [...] (counter-clockwise)."""
    c, s = jnp.cos(yaw), jnp.sin(yaw)
    return jnp.stack([c * xy[..., 0] - s * xy[..., 1], s * xy[..., 0] + c * xy[..., 1]], -1)


def to_frame(xy: jax.Array, origin: jax.Array, yaw: jax.Array) -> jax.Array:
    """World points [..., 2] into the frame at origin [..., 2] with heading yaw [...]."""
    return rotate(xy - origin, -yaw)


def box_corners(xy: jax.Array, yaw: jax.Array, size: jax.Array) -> jax.Array:
    """Corners [..., 4, 2] of boxes at xy [..., 2], yaw [...], size [..., 2] = (length, width)."""
    half = 0.5 * size
    signs = jnp.array([[1.0, 1.0], [1.0, -1.0], [-1.0, -1.0], [-1.0, 1.0]])
    local = signs * half[..., None, :]
    return xy[..., None, :] + rotate(local, yaw[..., None])


def overlap_matrix(xy: jax.Array, yaw: jax.Array, size: jax.Array) -> jax.Array:
    """Pairwise oriented-box overlap by the separating-axis theorem.

    xy [A, 2], yaw [A], size [A, 2] -> [A, A] bool (diagonal False). Touching boxes (a shared
    edge or corner, zero penetration) do not overlap.
    """
    overlap = _sat(_box_terms(xy, yaw, size, 1), _box_terms(xy, yaw, size, 0))
    # Exactly symmetric whatever the rounding (fused multiply-adds differ between (i, j) and (j, i)).
    return overlap & overlap.T & ~jnp.eye(xy.shape[0], dtype=bool)


def overlap_rows(xy: jax.Array, yaw: jax.Array, size: jax.Array, rows: jax.Array) -> jax.Array:
    """Rows of `overlap_matrix`: boxes rows [C] (indices) against all A boxes -> [C, A] bool.

    Each pair is tested once, in the (row, other) orientation, so no [A, A] work is done; two
    listed rows agree about their pair because the one term whose rounding depends on the order
    (|sin| of the heading difference) is computed symmetrically here.
    """
    mine = _box_terms(xy[rows], yaw[rows], size[rows], 1)
    overlap = _sat(mine, _box_terms(xy, yaw, size, 0), symmetric=True)
    return overlap & (rows[:, None] != jnp.arange(xy.shape[0])[None, :])


def _box_terms(xy, yaw, size, axis):
    """(x, y, cos, sin, half length, half width), each expanded on `axis` for broadcasting."""
    terms = (xy[:, 0], xy[:, 1], jnp.cos(yaw), jnp.sin(yaw), 0.5 * size[:, 0], 0.5 * size[:, 1])
    return tuple(jnp.expand_dims(t, axis) for t in terms)


def _sat(box_i, box_j, symmetric: bool = False):
    """[I, J] bool: boxes i [I, 1] and j [1, J] overlap (no separating axis among the four).

    symmetric: |sin| as max - min of the two products, identical for (i, j) and (j, i) (|p - q|
    may be fused into a multiply-add that rounds differently in the two orders).
    """
    xi, yi, ci, si, hl_i, hw_i = box_i
    xj, yj, cj, sj, hl_j, hw_j = box_j
    dx, dy = xj - xi, yj - yi  # [i, j] vector from i to j
    c = jnp.abs(cj * ci + sj * si)  # |cos(yaw_j - yaw_i)|
    if symmetric:
        p, q = sj * ci, cj * si
        s = jnp.maximum(p, q) - jnp.minimum(p, q)  # |sin(yaw_j - yaw_i)|
    else:
        s = jnp.abs(sj * ci - cj * si)  # |sin(yaw_j - yaw_i)|
    eps = 1e-4  # penetration below 0.1 mm is touching
    return (
        # Axes of box i: |d . axis| against both boxes' extents along it.
        (jnp.abs(dx * ci + dy * si) < hl_i + hl_j * c + hw_j * s - eps)
        & (jnp.abs(-dx * si + dy * ci) < hw_i + hl_j * s + hw_j * c - eps)
        # Axes of box j.
        & (jnp.abs(dx * cj + dy * sj) < hl_j + hl_i * c + hw_i * s - eps)
        & (jnp.abs(-dx * sj + dy * cj) < hw_j + hl_i * s + hw_i * c - eps)
    )


def point_segment(p: jax.Array, a: jax.Array, b: jax.Array):
    """Closest-point parameter and distance from points p [..., 2] to segments a-b [..., 2].

    Returns (t [...] in [0, 1], dist [...]).
    """
    ab = b - a
    denom = jnp.maximum(jnp.sum(ab * ab, -1), 1e-12)
    t = jnp.clip(jnp.sum((p - a) * ab, -1) / denom, 0.0, 1.0)
    closest = a + t[..., None] * ab
    return t, jnp.linalg.norm(p - closest, axis=-1)


def signed_distance(p, a, b, tan0, tan1, valid):
    """Signed distance from points p [..., 2] to the nearest of candidate segments [..., M, ...].

    a, b, tan0, tan1: [..., M, 2]; valid [..., M] (leading axes broadcast against p's).
    Positive = right of the nearest segment (off-road for road edges, which keep the road on their
    left). At a vertex the sign uses the tangent
    bisector, so convex and concave corners are signed correctly. No valid candidate -> +inf
    ("far from any edge"). Every candidate is signed, then the nearest is picked with plain
    min / max reductions (no argmin: its variadic reduce is slow on XLA:CPU); among equally near
    candidates the most off-road sign wins.
    """
    q = p[..., None, :]
    ab = b - a
    length = jnp.maximum(jnp.linalg.norm(ab, axis=-1, keepdims=True), 1e-9)
    t = jnp.clip(jnp.sum((q - a) * ab, -1) / jnp.square(length[..., 0]), 0.0, 1.0)
    rel = q - (a + t[..., None] * ab)
    dist = jnp.where(valid, jnp.linalg.norm(rel, axis=-1), jnp.inf)
    tangent = jnp.where(t[..., None] <= 1e-6, tan0, jnp.where(t[..., None] >= 1 - 1e-6, tan1, ab / length))
    cross = tangent[..., 0] * rel[..., 1] - tangent[..., 1] * rel[..., 0]  # > 0: left of the edge
    signed = jnp.where(cross > 0, -dist, dist)
    nearest = jnp.min(dist, axis=-1, keepdims=True)
    picked = jnp.max(jnp.where(dist <= nearest + 1e-6, signed, -jnp.inf), axis=-1)
    return jnp.where(jnp.isfinite(nearest[..., 0]), picked, jnp.inf)


def cell_of(xy: jax.Array, origin: jax.Array, cell: jax.Array, grid_size: int) -> jax.Array:
    """Flat grid cell index [...] of points [..., 2], clamped to the grid."""
    ij = jnp.floor((xy - origin) / cell).astype(jnp.int32)
    ij = jnp.clip(ij, 0, grid_size - 1)
    return ij[..., 1] * grid_size + ij[..., 0]


def _segment_rect_distance(a, b, lo, hi):
    """Approximate distance [C, S] from segments a-b [S, 2] to axis-aligned cells lo, hi [C, 2].

    Exact when the segment is outside the cell and no longer than the cell; zero when an endpoint
    or the midpoint is inside. Good enough for ranking candidates.
    """
    center = 0.5 * (lo + hi)
    half = 0.5 * (hi - lo)
    # Distance from the closest point on the segment to the cell centre, minus the cell extent.
    t, _ = point_segment(center[:, None, :], a[None], b[None])
    closest = a[None] + t[..., None] * (b - a)[None]
    gap = jnp.maximum(jnp.abs(closest - center[:, None, :]) - half[:, None, :], 0.0)
    return jnp.linalg.norm(gap, axis=-1)


@functools.partial(jax.jit, static_argnames=("cfg",))
def build_road_index(road_xy0, road_xy1, road_type, road_valid, cfg: types.SimConfig):
    """Uniform grid over the road's bounding box, built once per scene.

    Returns (origin [2], cell [], cell_edges [G2, Me], cell_lanes [G2, Ml], cell_road [G2, k]):
    per cell, the ids of the road-edge segments and lane segments nearest the cell (by distance to
    the cell's square) and of the k road segments of any type nearest the cell centre; -1 pads.
    """
    g = cfg.grid_size
    pts = jnp.concatenate([road_xy0, road_xy1], 0)
    ok = jnp.concatenate([road_valid, road_valid], 0)
    lo = jnp.min(jnp.where(ok[:, None], pts, jnp.inf), 0)
    hi = jnp.max(jnp.where(ok[:, None], pts, -jnp.inf), 0)
    lo = jnp.where(jnp.isfinite(lo), lo, 0.0) - 5.0
    hi = jnp.where(jnp.isfinite(hi), hi, 0.0) + 5.0
    cell = jnp.max(hi - lo) / g
    ii, jj = jnp.meshgrid(jnp.arange(g), jnp.arange(g), indexing="xy")
    cell_lo = lo + cell * jnp.stack([ii.ravel(), jj.ravel()], -1).astype(jnp.float32)

    def nearest(dist, mask, k):
        dist = jnp.where(mask[None, :], dist, jnp.inf)
        neg, idx = jax.lax.top_k(-dist, k)
        return jnp.where(jnp.isfinite(neg), idx, -1).astype(jnp.int32)

    def row_fn(row):  # one row of cells at a time bounds memory at [G, S]
        rlo = jax.lax.dynamic_slice_in_dim(cell_lo, row * g, g)
        rhi = rlo + cell
        d_rect = _segment_rect_distance(road_xy0, road_xy1, rlo, rhi)
        center = rlo + 0.5 * cell
        _, d_center = point_segment(center[:, None, :], road_xy0[None], road_xy1[None])
        edges = nearest(d_rect, road_valid & (road_type == types.ROAD_EDGE), cfg.cell_edges)
        lanes = nearest(d_rect, road_valid & (road_type == types.LANE), cfg.cell_lanes)
        road = nearest(d_center, road_valid, cfg.obs_road)
        return edges, lanes, road

    edges, lanes, road = jax.lax.map(row_fn, jnp.arange(g))
    flat = lambda x: x.reshape(g * g, -1)  # noqa: E731
    return lo, cell, flat(edges), flat(lanes), flat(road)


def take(table: jax.Array, *index: jax.Array) -> jax.Array:
    """table[index] for a table [..., C] with C trailing columns, done as C gathers of scalars:
    on XLA:CPU that is markedly faster than gathering C-wide rows (see docs/measurements/simulator.md)."""
    return jnp.stack([table[..., j][index] for j in range(table.shape[-1])], -1)


def gather_segments(scenario, ids: jax.Array):
    """Segments for ids [...] (-1 = none): (a [..., 2], b [..., 2], tan0, tan1, valid [...])."""
    safe = jnp.maximum(ids, 0)
    valid = (ids >= 0) & scenario.road_valid[safe]
    return (
        scenario.road_xy0[safe], scenario.road_xy1[safe],
        scenario.road_tan0[safe], scenario.road_tan1[safe], valid,
    )


def edge_distance(points: jax.Array, scenario, cfg: types.SimConfig, anchor: jax.Array | None = None) -> jax.Array:
    """Signed distance [P, C] of points [P, C, 2] to road edges via the grid (positive = off-road).

    Candidates come from the cell of anchor [P, 2] (default: each point's own cell), gathered
    once per row: e.g. the four corners of a box share the candidates of its centre's cell.
    """
    anchor = points[..., 0, :] if anchor is None else anchor
    cells = cell_of(anchor, scenario.grid_origin, scenario.grid_cell, cfg.grid_size)
    a, b, t0, t1, valid = gather_segments(scenario, scenario.cell_edges[cells])  # [P, M, ...]
    expand = lambda x: x[:, None]  # noqa: E731 - shared by the C points of a row
    return signed_distance(points, expand(a), expand(b), expand(t0), expand(t1), expand(valid))


def lane_frame(xy: jax.Array, yaw: jax.Array, scenario, cfg: types.SimConfig):
    """Pose relative to the nearest lane centreline segment (distance + 2 m x (1 - cos heading
    difference), so lanes going the agent's way win at junctions), via the grid.

    xy [A, 2], yaw [A] -> (heading error [A] in (-pi, pi], lateral offset [A] (positive = right of
    the centreline), distance [A], found [A] bool).
    """
    cells = cell_of(xy, scenario.grid_origin, scenario.grid_cell, cfg.grid_size)
    a, b, _, _, valid = gather_segments(scenario, scenario.cell_lanes[cells])
    _, dist = point_segment(xy[:, None, :], a, b)
    dist = jnp.where(valid, dist, jnp.inf)
    # Prefer lanes going the agent's way: at junctions a crossing or opposing lane can be nearer.
    seg_dir = b - a
    cos_h = (seg_dir[..., 0] * jnp.cos(yaw)[:, None] + seg_dir[..., 1] * jnp.sin(yaw)[:, None]) / jnp.maximum(
        jnp.linalg.norm(seg_dir, axis=-1), 1e-9
    )
    idx = jnp.argmin(dist + 2.0 * (1.0 - cos_h), -1)
    pick = lambda x: jnp.take_along_axis(x, idx[:, None, None], 1)[:, 0]  # noqa: E731
    a_n, b_n = pick(a), pick(b)
    seg = b_n - a_n
    lane_yaw = jnp.arctan2(seg[:, 1], seg[:, 0])
    err = jnp.arctan2(jnp.sin(yaw - lane_yaw), jnp.cos(yaw - lane_yaw))
    rel = xy - a_n
    norm = jnp.maximum(jnp.linalg.norm(seg, axis=-1), 1e-9)
    lateral = -(seg[:, 0] * rel[:, 1] - seg[:, 1] * rel[:, 0]) / norm
    d = jnp.take_along_axis(dist, idx[:, None], 1)[:, 0]
    found = jnp.isfinite(d)
    return jnp.where(found, err, 0.0), jnp.where(found, lateral, 0.0), d, found
