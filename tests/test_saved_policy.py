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
