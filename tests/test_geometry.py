import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_jax.scenarios.builder import build_scenario, polyline_segments
from cp_jax.sim import env, geometry
from tests.worlds import small_config, straight_road

overlap_jit = jax.jit(geometry.overlap_matrix)


def pair(b1, b2):
    """Overlap of two boxes given as (x, y, yaw, length, width)."""
    b = np.array([b1, b2], np.float32)
    return bool(overlap_jit(jnp.asarray(b[:, :2]), jnp.asarray(b[:, 2]), jnp.asarray(b[:, 3:]))[0, 1])


def test_overlap_hand_made_boxes():
    assert pair((0, 0, 0, 4, 2), (3, 0, 0, 4, 2))  # 1 m longitudinal penetration
    assert not pair((0, 0, 0, 4, 2), (4, 0, 0, 4, 2))  # touching end to end
    assert not pair((0, 0, 0, 4, 2), (0, 2, 0, 4, 2))  # touching side by side
    assert not pair((0, 0, 0, 4, 2), (10, 0, 0, 4, 2))  # separated
    assert pair((0, 0, 0, 4, 2), (0.2, 0.1, 0.3, 1, 0.5))  # one inside the other
    # Rotated 45 deg: its corner reaches 2 + sqrt(2) * 1.0 ... the axis-aligned test would differ.
    assert pair((0, 0, 0, 4, 2), (3.3, 0, np.pi / 4, 2, 2))  # corner pokes in (reaches x = 3.3 - 1.414)
    assert not pair((0, 0, 0, 4, 2), (3.5, 0, np.pi / 4, 2, 2))  # corner at x = 2.086 > 2
    # Separated only along an axis of the rotated box (SAT needs all four axes).
    assert not pair((0, 0, 0, 4, 2), (3.2, 2.2, np.pi / 4, 2, 2))


def _reference_overlap(b1, b2, n=60):
    """Dense point sampling: some point of one box strictly inside the other."""
    def inside(points, b):
        x, y, yaw, length, width = b
        local = geometry.rotate(jnp.asarray(points - np.array([x, y])), jnp.asarray(-yaw))
        return np.any((np.abs(local[:, 0]) < length / 2) & (np.abs(local[:, 1]) < width / 2))

    def samples(b):
        x, y, yaw, length, width = b
        u = np.linspace(-0.5, 0.5, n)
        g = np.stack(np.meshgrid(u * length, u * width), -1).reshape(-1, 2)
        return np.asarray(geometry.rotate(jnp.asarray(g), jnp.asarray(yaw))) + np.array([x, y])

    return inside(samples(b1), b2) or inside(samples(b2), b1)


box = st.tuples(
    st.floats(-4, 4), st.floats(-4, 4), st.floats(-np.pi, np.pi), st.floats(0.5, 5), st.floats(0.5, 3)
)


@settings(max_examples=60, deadline=None)
@given(box, box)
def test_overlap_matches_sampling_reference(b1, b2):
    ours = pair(b1, b2)
    assert ours == pair(b2, b1)  # symmetric
    ref = _reference_overlap(b1, b2)
    grow = lambda b, f: (b[0], b[1], b[2], b[3] * f, b[4] * f)  # noqa: E731
    if ref and not ours:  # only a boundary case may differ: 0.3% larger boxes must overlap
        assert pair(grow(b1, 1.003), grow(b2, 1.003))
    elif ours and not ref:  # sampling can miss thin overlaps: 3% smaller boxes must not overlap
        assert not pair(grow(b1, 0.97), grow(b2, 0.97)) or _reference_overlap(b1, b2, n=200)


def test_polyline_tangent_bisectors():
    xy0, xy1, t0, t1 = polyline_segments(np.array([[0, 0], [10, 0], [10, 10], [10, 10]]))
    assert len(xy0) == 2  # the zero-length segment is dropped
    np.testing.assert_allclose(t1[0], np.array([1, 1]) / np.sqrt(2), atol=1e-9)
    np.testing.assert_allclose(t0[1], np.array([1, 1]) / np.sqrt(2), atol=1e-9)
    np.testing.assert_allclose(t0[0], [1, 0])


def test_signed_distance_square_road():
    """A CCW square road 0..10: inside negative, outside positive, also near corners."""
    sq = np.array([[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]], np.float64)
    a, b, t0, t1 = (jnp.asarray(x, jnp.float32) for x in polyline_segments(sq))
    pts = jnp.array([[5, 5], [5, -1], [11, 11], [-0.5, -0.5], [0.5, 0.5], [9.9, 0.1], [5, 10.5]], jnp.float32)
    m = a.shape[0]
    sd = geometry.signed_distance(
        pts, *(jnp.broadcast_to(x, (len(pts), m, 2)) for x in (a, b, t0, t1)), jnp.ones((len(pts), m), bool)
    )
    sd = np.asarray(sd)
    np.testing.assert_allclose(sd, [-5, 1, np.sqrt(2), np.sqrt(0.5), -0.5, -0.1, 0.5], atol=1e-5)


def test_offroad_on_known_road():
    """Edges at y = +-4: a car at y = -2 is on-road; at y = -3.5 a corner crosses y = -4."""
    cfg = small_config()
    raw = straight_road([(50, -2, 0, 0), (80, -3.5, 0, 0), (110, 2.9, 0, 0), (140, 6.0, 0.3, 0)])
    sc = build_scenario(raw, cfg)
    st_ = env.reset(sc, jax.random.PRNGKey(0), jnp.zeros(10), cfg)
    off = np.asarray(env.is_offroad(st_.xy, st_.yaw, sc, cfg))[:4]
    np.testing.assert_array_equal(off, [False, True, False, True])


def test_grid_edge_distance_matches_brute_force():
    cfg = small_config()
    sc = build_scenario(straight_road([(50, -2, 0, 0)]), cfg)
    rng = np.random.default_rng(0)
    pts = jnp.asarray(np.stack([rng.uniform(-10, 210, 400), rng.uniform(-12, 12, 400)], -1), jnp.float32)
    ours = np.asarray(geometry.edge_distance(pts[:, None, :], sc, cfg))[:, 0]
    edge = np.asarray(sc.road_valid & (sc.road_type == 1))
    a, b = sc.road_xy0[edge], sc.road_xy1[edge]
    m = a.shape[0]
    ref = geometry.signed_distance(
        pts, *(jnp.broadcast_to(x, (400, m, 2)) for x in (a, b, sc.road_tan0[edge], sc.road_tan1[edge])),
        jnp.ones((400, m), bool),
    )
    np.testing.assert_allclose(ours, np.asarray(ref), atol=1e-4)


def test_lane_frame_offsets():
    cfg = small_config()
    sc = build_scenario(straight_road([(50, -2, 0, 0)]), cfg)
    # Eastbound lane at y = -2: a car at y = -2.5 heading 0.1 rad is 0.5 m right of it.
    err, lat, dist, found = geometry.lane_frame(jnp.array([[60.0, -2.5]]), jnp.array([0.1]), sc, cfg)
    assert bool(found[0])
    np.testing.assert_allclose(np.asarray(lat), [0.5], atol=1e-5)
    np.testing.assert_allclose(np.asarray(err), [0.1], atol=1e-5)
