"""Saved policies: round trip, clear errors naming the file, and the shipped anchors load and drive."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from cp_jax.policy import networks, saved
from tests.worlds import small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NET = dataclasses.replace(networks.small(), set_width=8, trunk=(16,))


def test_round_trip_and_errors(tmp_path):
    sim = small_config()
    params = networks.init_params(NET, sim, jax.random.PRNGKey(3))
    saved.save(str(tmp_path / "p"), NET, params, sim)
    back = saved.load(str(tmp_path / "p"))
    assert back.net.cfg == NET and back.sim == sim
    jax.tree.map(np.testing.assert_array_equal, back.params, params)

    (tmp_path / "p" / "net_config.json").write_text(json.dumps(dict(dataclasses.asdict(NET), set_width=-1)))
    with pytest.raises(ValueError, match=r"net_config.json.*set_width"):
        saved.load(str(tmp_path / "p"))
    (tmp_path / "p" / "net_config.json").write_text(json.dumps(dict(dataclasses.asdict(NET), set_width=9)))
    with pytest.raises(ValueError, match="params.msgpack"):
        saved.load(str(tmp_path / "p"))
    os.remove(tmp_path / "p" / "sim_config.json")
    with pytest.raises(FileNotFoundError, match="sim_config.json"):
        saved.load(str(tmp_path / "p"))


def test_damaged_params_file_is_named_damaged_not_mismatched(tmp_path):
    """A truncated, emptied or overwritten params.msgpack is damaged (issue #33): no net_config.json fits it."""
    sim = small_config()
    saved.save(str(tmp_path / "p"), NET, networks.init_params(NET, sim, jax.random.PRNGKey(3)), sim)
    path = tmp_path / "p" / "params.msgpack"
    data = path.read_bytes()
    for damaged in (data[: len(data) // 2], data[:-3], b"", b"\x05"):
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=r"params.msgpack: damaged") as err:
            saved.load(str(tmp_path / "p"))
        assert "does not match" not in str(err.value)
    path.write_bytes(data)
    assert saved.load(str(tmp_path / "p")).net.cfg == NET


@pytest.mark.parametrize("name", ["conditioned_small", "ppo_small"])
def test_shipped_anchor_loads_and_drives(name):
    from cp_jax.rl import evaluate
    from cp_jax.scenarios.bank import make_bank
    from cp_jax.sim import conditions, types
    from tests.worlds import straight_road

    folder = os.path.join(ROOT, "assets", "anchors", name)
    pol = saved.load(folder)
    for f in ("README.md", "curve.png", "eval.json"):
        assert os.path.exists(os.path.join(folder, f)), f
    sim = small_config(obs_partners=pol.sim.obs_partners, obs_road=pol.sim.obs_road)
    bank = make_bank([straight_road([(10.0, -2.0, 0.0, 5.0), (40.0, -2.0, 0.0, 5.0)])], sim)
    r = evaluate.evaluate(pol.net, pol.params, bank, conditions.style("normal"), types.default_params(), sim,
                     jax.random.PRNGKey(0))
    assert int(r["controlled"].sum()) == 2
    assert np.all(np.isfinite(np.asarray(r["mean_speed"])))
    assert float(np.asarray(r["mean_speed"])[0, 0]) > 0.5  # it drives (log speed 5 m/s at start)
