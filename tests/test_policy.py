"""Actor-critic and categorical distribution on real observations of a tiny straight-road scene."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cp_jax.policy import distributions as dist
from cp_jax.policy import networks as nets
from cp_jax.scenarios.builder import build_scenario
from cp_jax.sim import conditions, env
from cp_jax.sim.types import OBJECT_TYPES, ROAD_TYPES
from tests.worlds import small_config, straight_road

SIM = small_config(obs_partners=7, obs_road=16)
FF = nets.NetConfig(set_width=8, trunk=(16,))
LSTM = nets.NetConfig(set_width=8, trunk=(16,), lstm=12, separate_towers=True)


@pytest.fixture(scope="module")
def obs():
    """Obs [A=8]: three agents on a straight road (rows 3..7 dead, all-zero and fully masked); the last 5
    road slots masked like a scene with few segments."""
    raw = straight_road([(20.0, -2.0, 0.0, 5.0), (35.0, -2.0, 0.0, 4.0), (60.0, 2.0, np.pi, 6.0)])
    sc = build_scenario(raw, SIM)
    state = env.reset(sc, jax.random.PRNGKey(0), conditions.style("normal"), SIM)
    o = env.observe(state, sc, SIM)
    keep = o.road_mask & (jnp.arange(SIM.obs_road) < SIM.obs_road - 5)  # a short road list: last 5 padded
    o = o.replace(road_mask=keep, road=jnp.where(keep[..., None], o.road, 0.0))
    assert bool(o.partner_mask[0, 0]) and not bool(o.partner_mask[0].all()) and bool(o.road_mask[0].any())
    return o


def apply(cfg, o, carry=None, key=0):
    params = nets.init_params(cfg, SIM, jax.random.PRNGKey(key))
    return nets.ActorCritic(cfg).apply(params, o, carry)


def batched(o, b):
    return jax.tree.map(lambda x: jnp.stack([x] * b), o)


@pytest.mark.parametrize("cfg", [FF, LSTM], ids=["ff", "lstm"])
@pytest.mark.parametrize("lead", [(8,), (3, 8)])
def test_shapes(obs, cfg, lead):
    o = obs if len(lead) == 1 else batched(obs, lead[0])
    logits, value, carry = apply(cfg, o, nets.initial_carry(cfg, lead))
    assert logits.shape == (*lead, cfg.num_actions) and value.shape == lead
    assert logits.dtype == value.dtype == jnp.float32
    if cfg.lstm:
        assert jax.tree.structure(carry) == jax.tree.structure(nets.initial_carry(cfg, lead))
        assert all(x.shape == (*lead, cfg.lstm) for x in jax.tree.leaves(carry))
    else:
        assert carry is None


def test_param_counts():
    count = lambda cfg: nets.num_params(jax.eval_shape(lambda: nets.init_params(cfg, SIM, jax.random.PRNGKey(0))))
    assert 50_000 <= count(nets.small()) <= 300_000
    assert 4 * count(nets.small()) <= count(nets.medium()) <= 1_000_000  # the wider trunk, the same encoders
    assert 5_000_000 <= count(nets.large()) <= 7_000_000
    assert count(nets.NetConfig(condition=False)) < count(nets.NetConfig())


def test_chunked_sets_match_unchunked(obs):
    o = batched(obs, 3)  # 24 rows: chunks of 5 leave a remainder
    a, b = apply(FF, o), apply(nets.NetConfig(set_width=8, trunk=(16,), chunk=5), o)
    np.testing.assert_allclose(a[0], b[0], atol=1e-6)
    np.testing.assert_allclose(a[1], b[1], atol=1e-6)


def test_masked_elements_do_not_matter(obs):
    """Garbage (huge values, out-of-range types, NaN) in masked partner / road rows changes nothing."""
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    junk_p = 1e3 * jax.random.normal(k1, obs.partners.shape).at[..., -1].set(len(OBJECT_TYPES) + 2)
    junk_r = 1e3 * jax.random.normal(k2, obs.road.shape).at[..., -1].set(-3).at[..., 0].set(jnp.nan)
    noisy = obs.replace(
        partners=jnp.where(obs.partner_mask[..., None], obs.partners, junk_p),
        road=jnp.where(obs.road_mask[..., None], obs.road, junk_r),
    )
    for cfg in (FF, nets.NetConfig(set_width=8, trunk=(16,), chunk=3)):
        clean, dirty = apply(cfg, obs), apply(cfg, noisy)
        np.testing.assert_array_equal(clean[0], dirty[0])
        np.testing.assert_array_equal(clean[1], dirty[1])
    # ... while changing a live road element does change the output.
    moved = obs.replace(road=jnp.where(obs.road_mask[..., None], obs.road + 0.5, obs.road))
    assert not np.array_equal(apply(FF, obs)[0][0], apply(FF, moved)[0][0])


def test_type_ids_are_one_hot(obs):
    """Each road type id gets its own code (a one-hot, not one scalar weight on the id)."""
    x = nets._with_type(jnp.array([[0.3, 2.0], [0.1, 6.0]]), len(ROAD_TYPES))
    np.testing.assert_allclose(x, [[0.3, 0, 0, 1, 0, 0, 0, 0], [0.1, 0, 0, 0, 0, 0, 0, 1]])
    one = obs.replace(road_mask=obs.road_mask.at[0, 1:].set(False))  # row 0 sees a single segment
    logits = [apply(FF, one.replace(road=one.road.at[0, 0, -1].set(t)))[0][0] for t in range(len(ROAD_TYPES))]
    assert len({np.asarray(x).tobytes() for x in logits}) == len(ROAD_TYPES)


def test_all_masked_sets_are_finite(obs):
    empty = obs.replace(
        partner_mask=jnp.zeros_like(obs.partner_mask), road_mask=jnp.zeros_like(obs.road_mask),
        partners=jnp.full_like(obs.partners, jnp.nan), road=jnp.full_like(obs.road, jnp.inf),
    )
    for cfg in (FF, LSTM):
        logits, value, _ = apply(cfg, empty, nets.initial_carry(cfg, (8,)))
        assert np.isfinite(logits).all() and np.isfinite(value).all()


def test_condition_input(obs):
    a = nets.with_condition(obs, conditions.style("aggressive"))
    c = nets.with_condition(obs, conditions.style("cautious"))
    assert not np.array_equal(apply(FF, a)[0][:3], apply(FF, c)[0][:3])
    off = nets.NetConfig(set_width=8, trunk=(16,), condition=False)
    np.testing.assert_array_equal(apply(off, a)[0], apply(off, c)[0])


def test_with_condition_and_value_under(obs):
    cond = conditions.style("aggressive")
    o = nets.with_condition(obs, cond)
    np.testing.assert_allclose(o.cond[:3], jnp.broadcast_to(conditions.scale(cond), (3, 10)), atol=1e-6)
    assert float(jnp.abs(o.cond[3:]).sum()) == 0.0  # dead rows stay zero
    np.testing.assert_allclose(o.cond, obs.replace(cond=o.cond).cond)
    net, params = nets.ActorCritic(FF), nets.init_params(FF, SIM, jax.random.PRNGKey(0))
    raw = jnp.stack([conditions.style("cautious")] * 4 + [conditions.style("aggressive")] * 4)  # [A, 10]
    v1 = nets.value_under(net, params, obs, conditions.style("cautious"))
    v2 = nets.value_under(net, params, obs, raw)
    assert v1.shape == (8,)
    np.testing.assert_allclose(v1[:3], v2[:3])
    v3 = jax.jit(nets.value_under, static_argnums=0)(net, params, obs, conditions.style("aggressive"))
    assert not np.allclose(v1[:3], v3[:3])


def test_lstm_carry_and_reset(obs):
    params = nets.init_params(LSTM, SIM, jax.random.PRNGKey(0))
    net = nets.ActorCritic(LSTM)
    l1, v1, c1 = net.apply(params, obs, nets.initial_carry(LSTM, (8,)))
    l2, v2, c2 = net.apply(params, obs, c1)
    assert not np.allclose(l1[:3], l2[:3]) and not np.allclose(v1[:3], v2[:3])
    done = jnp.arange(8) % 2 == 0
    reset = nets.reset_carry(c2, done)
    for before, after in zip(jax.tree.leaves(c2), jax.tree.leaves(reset), strict=True):
        assert float(jnp.abs(after[done]).sum()) == 0.0
        np.testing.assert_array_equal(after[~done], before[~done])
    assert nets.reset_carry(None, done) is None
    with pytest.raises(ValueError, match="carry"):
        net.apply(params, obs)


def test_jit_vmap_and_finite_gradients(obs):
    net, params = nets.ActorCritic(LSTM), nets.init_params(LSTM, SIM, jax.random.PRNGKey(0))
    o = batched(obs, 2)
    carry = nets.initial_carry(LSTM, (2, 8))
    fwd = jax.jit(lambda p, o, c: net.apply(p, o, c)[:2])
    direct = fwd(params, o, carry)
    mapped = jax.vmap(fwd, in_axes=(None, 0, 0))(params, o, carry)
    np.testing.assert_allclose(direct[0], mapped[0], atol=1e-6)
    np.testing.assert_allclose(direct[1], mapped[1], atol=1e-6)

    actions = jnp.arange(16).reshape(2, 8) % LSTM.num_actions

    def loss(p):
        logits, value, _ = net.apply(p, o, carry)
        return -dist.log_prob(logits, actions).mean() - 0.01 * dist.entropy(logits).mean() + (value**2).mean()

    grads = jax.jit(jax.grad(loss))(params)
    leaves = jax.tree.leaves(grads)
    assert all(bool(jnp.isfinite(g).all()) for g in leaves)
    assert sum(float(jnp.abs(g).sum()) for g in leaves) > 0


def test_obs_gain_rescales_positions_and_speeds_but_not_types(obs):
    gained = nets.NetConfig(set_width=8, trunk=(16,), obs_gain=True)
    scaled = obs.replace(**{name: getattr(obs, name) * jnp.asarray(nets.OBS_GAINS[name]) for name in nets.OBS_GAINS})
    a, b = apply(gained, obs), apply(FF, scaled)  # same parameters: the gain is the only difference
    np.testing.assert_allclose(a[0], b[0], atol=1e-5)
    np.testing.assert_allclose(a[1], b[1], atol=1e-5)
    assert not np.allclose(a[0], apply(FF, obs)[0], atol=1e-5)
    for name, dim in (("partners", -1), ("road", -1)):  # the type id column is an index: never scaled
        assert nets.OBS_GAINS[name][dim] == 1.0
    assert nets.small().obs_gain and nets.large().obs_gain and not nets.NetConfig().obs_gain  # saved before: off


def test_validate_names_the_field():
    with pytest.raises(ValueError, match="set_width"):
        nets.NetConfig(set_width=0)
    with pytest.raises(ValueError, match="trunk"):
        nets.NetConfig(trunk=[256])
    with pytest.raises(ValueError, match="lstm"):
        nets.NetConfig(lstm=-1)
    with pytest.raises(ValueError, match="condition"):
        nets.NetConfig(condition=1)
    hash(nets.small()), hash(nets.large())
    assert sorted(nets.PRESETS) == ["large", "medium", "small"]
    assert nets.PRESETS["medium"]().set_width == nets.small().set_width


def test_distributions():
    logits = jax.random.normal(jax.random.PRNGKey(0), (5, 91)) * 3
    probs = jnp.exp(jnp.stack([dist.log_prob(logits, jnp.full((5,), a)) for a in range(91)], -1))
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(dist.entropy(jnp.zeros((4, 91))), np.log(91), rtol=1e-6)
    assert np.isfinite(dist.entropy(jnp.array([0.0, -jnp.inf, 1.0]))).all()
    np.testing.assert_array_equal(dist.greedy(logits), np.argmax(np.asarray(logits), -1))
    assert dist.greedy(logits).dtype == jnp.int32


def test_sample_frequencies_match_softmax():
    logits = jnp.array([1.0, 0.0, -1.0, 2.0, -jnp.inf])
    n = 20_000
    draws = dist.sample(jax.random.PRNGKey(3), jnp.broadcast_to(logits, (n, 5)))
    assert draws.dtype == jnp.int32 and draws.shape == (n,)
    freq = np.bincount(np.asarray(draws), minlength=5) / n
    p = np.asarray(jax.nn.softmax(logits))
    assert freq[4] == 0.0
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(p * (1 - p) / n).max())
