"""Checkpoints (round trip, keep-k, corrupt and killed saves) and metric logs (JSONL, TensorBoard, progress)."""

import logging
import math
import os
import struct
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from cp_jax.io.checkpoints import Checkpointer
from cp_jax.io.metrics import MetricWriter, Progress, read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_state(seed: int):
    """A pytree like the trainer's: params, adam state, counters, raw key data."""
    k = jax.random.key(seed)
    params = {"dense": {"w": jax.random.normal(k, (3, 4)), "b": jnp.arange(4.0) * seed}, "log_std": jnp.float32(-0.5)}
    opt = optax.adam(1e-3)
    opt_state = opt.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    _, opt_state = opt.update(grads, opt_state, params)
    return {"params": params, "opt_state": opt_state, "key": jax.random.key_data(jax.random.fold_in(k, 7)),
            "update": jnp.int32(seed), "agent_steps": np.int64(10**10 + seed), "np_counts": np.arange(3) + seed}


def assert_bit_identical(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def test_round_trip_is_bit_identical(tmp_path):
    state = train_state(3)
    with Checkpointer(tmp_path / "ckpt") as ckpt:
        assert ckpt.latest_step() is None
        ckpt.save(5, state)
        assert ckpt.latest_step() == 5
    with Checkpointer(tmp_path / "ckpt") as ckpt:  # a fresh process would do this
        step, restored = ckpt.restore(train_state(0))
        assert step == 5
        assert_bit_identical(restored, state)
        assert isinstance(restored["agent_steps"], np.int64) and isinstance(restored["update"], jax.Array)
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), state)
        _, from_abstract = ckpt.restore(abstract)
        assert_bit_identical(jax.tree.map(np.asarray, from_abstract), jax.tree.map(np.asarray, state))


def test_keep_latest_and_given_step(tmp_path):
    with Checkpointer(tmp_path, keep=2) as ckpt:
        for s in (1, 2, 3, 4):
            ckpt.save(s, train_state(s))
        assert sorted(os.listdir(tmp_path)) == ["3", "4"]
        assert ckpt.latest_step() == 4
        step, restored = ckpt.restore(train_state(0), step=3)
        assert step == 3
        assert_bit_identical(restored, train_state(3))
        with pytest.raises(ValueError, match="already holds"):
            ckpt.save(4, train_state(4))


def test_empty_directory_restores_none(tmp_path):
    with Checkpointer(tmp_path / "none") as ckpt:
        assert ckpt.restore(train_state(0)) is None


def test_mismatched_like_raises(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, train_state(1))
        wrong_dtype = dict(train_state(0), key=jnp.zeros(2, jnp.int32))
        with pytest.raises(ValueError, match="key"):
            ckpt.restore(wrong_dtype)
        with pytest.raises(ValueError):
            ckpt.restore(dict(train_state(0), extra=jnp.zeros(2)))


def test_typed_key_is_rejected(tmp_path):
    with Checkpointer(tmp_path) as ckpt:
        with pytest.raises(TypeError, match="key_data"):
            ckpt.save(1, {"key": jax.random.key(0)})


def test_bogus_newer_step_is_skipped_then_moved_aside(tmp_path, caplog):
    with Checkpointer(tmp_path, keep=3) as ckpt:
        ckpt.save(1, train_state(1))
        ckpt.save(2, train_state(2))
        (tmp_path / "9").mkdir()  # e.g. left by a copy or a foreign tool
        with caplog.at_level(logging.WARNING):
            step, restored = ckpt.restore(train_state(0))
        assert step == 2
        assert_bit_identical(restored, train_state(2))
        assert any(str(tmp_path / "9") in r.getMessage() for r in caplog.records)
        ckpt.save(3, train_state(3))  # the bogus step would otherwise block saving step 3
        assert ckpt.latest_step() == 3
        assert any(n.startswith("9.corrupt-") for n in os.listdir(tmp_path))


def test_truncated_latest_falls_back_to_previous(tmp_path, caplog):
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, train_state(1))
        ckpt.save(2, train_state(2))
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "2") for f in fs]
    biggest = max(files, key=os.path.getsize)  # the array data
    with open(biggest, "r+b") as f:
        f.truncate(os.path.getsize(biggest) // 2)
    with Checkpointer(tmp_path) as ckpt, caplog.at_level(logging.WARNING):
        step, restored = ckpt.restore(train_state(0))
    assert step == 1
    assert_bit_identical(restored, train_state(1))
    assert any(str(tmp_path / "2") in r.getMessage() for r in caplog.records)


def test_only_corrupt_checkpoints_raise(tmp_path):
    (tmp_path / "4").mkdir()
    with Checkpointer(tmp_path) as ckpt, pytest.raises(ValueError, match="no readable checkpoint"):
        ckpt.restore(train_state(0))


def test_killed_save_is_invisible_to_restore(tmp_path):
    """SIGKILL right before orbax's final rename: all data written, step not committed."""
    script = textwrap.dedent(f"""
        import os, signal
        from orbax.checkpoint._src.path import async_path
        from tests.test_io import train_state
        from cp_jax.io.checkpoints import Checkpointer
        ckpt = Checkpointer({str(tmp_path)!r})
        ckpt.save(1, train_state(1))
        async def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        async_path.rename = die
        ckpt.save(2, train_state(2))
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == -9, res.stderr[-3000:]
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith("2.orbax-checkpoint-tmp")]
    assert leftovers, os.listdir(tmp_path)
    with Checkpointer(tmp_path) as ckpt:
        assert ckpt.latest_step() == 1
        step, restored = ckpt.restore(train_state(0))
        assert step == 1
        assert_bit_identical(restored, train_state(1))
        ckpt.save(2, train_state(2))  # resuming overwrites nothing and clears the leftover
        assert sorted(os.listdir(tmp_path)) == ["1", "2"]


def test_metric_writer_jsonl_round_trip(tmp_path, caplog):
    with MetricWriter(tmp_path, tensorboard=False) as w:
        w.write(1, {"loss": jnp.float32(0.5), "sps": np.float64(1e4), "updates": np.int32(3), "lr": 1e-3})
        with caplog.at_level(logging.WARNING):
            w.write(2, {"loss": jnp.float32(jnp.nan), "kl": float("inf")})
    assert any("non-finite" in r.getMessage() for r in caplog.records)
    recs = read_jsonl(tmp_path / "metrics.jsonl")
    assert recs == [{"step": 1, "loss": 0.5, "sps": 1e4, "updates": 3, "lr": 1e-3},
                    {"step": 2, "loss": None, "kl": None}]
    assert "null" in (tmp_path / "metrics.jsonl").read_text()


def test_metric_writer_resume_truncates(tmp_path):
    with MetricWriter(tmp_path, tensorboard=False) as w:
        for s in range(1, 6):
            w.write(s, {"x": float(s)})
    with MetricWriter(tmp_path, tensorboard=False) as w:  # resumed after restoring step 3
        w.truncate_after(3)
        w.write(4, {"x": 40.0})
    assert [(r["step"], r["x"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_tfrecords(path) -> list[bytes]:
    """Records of a TFRecord file, checking both masked crc32c of every record."""
    blob, out, i = open(path, "rb").read(), [], 0
    while i < len(blob):
        header = blob[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[i + 8:i + 12])
        assert len_crc == masked_crc(header)
        data = blob[i + 12:i + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[i + 12 + length:i + 16 + length])
        assert data_crc == masked_crc(data)
        out.append(data)
        i += 16 + length
    return out


def test_metric_writer_tensorboard_events(tmp_path):
    from tensorboardX.proto.event_pb2 import Event

    with MetricWriter(tmp_path) as w:
        w.write(1, {"loss": 0.25, "bad": math.nan})
        w.write(2, {"loss": 0.125})
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    scalars = []
    for rec in read_tfrecords(files[0]):
        ev = Event.FromString(rec)
        scalars += [(ev.step, v.tag, v.simple_value) for v in ev.summary.value]
    assert scalars == [(1, "loss", 0.25), (2, "loss", 0.125)]  # NaN left out


def test_progress_disabled_runs():
    with Progress(total_steps=100, desc="train", initial=10, disable=True) as bar:
        bar.update(30, {"loss": jnp.float32(0.1)})
        bar.update(60)


def _run(folder, init_from="", agent_steps=None, argv=("train_anchor.py", "--x=1"), policy=True):
    """A fake finished run: run_info.json (argv, init_from), eval.json, and an empty policy/ folder."""
    import json

    os.makedirs(os.path.join(folder, "policy") if policy else folder, exist_ok=True)
    with open(os.path.join(folder, "run_info.json"), "w") as f:
        json.dump(dict(argv=list(argv), git_revision="abc", config=dict(init_from=init_from)), f)
    normal = dict(goal=0.9, collision=0.05, offroad=0.02, timeout=0.03, mean_speed=7.0, agents=10)
    ev = (dict(epochs=3) if agent_steps is None
          else dict(updates=10, agent_steps=agent_steps, styles=dict(normal=normal)))
    with open(os.path.join(folder, "eval.json"), "w") as f:
        json.dump(ev, f)
    return os.path.join(folder, "policy")


def test_lineage_follows_init_from_and_counts_every_run(tmp_path):
    """A fine-tune of a fine-tune of a clone: lineage lists all three newest first (a policy/ folder
    resolves to its run), the clone counts 0 simulated steps, a start no longer on disk ends the list,
    an exported eval.json's own lineage is taken as is, and CounterPlay's budget reads the sum."""
    import json

    from cp_jax.io import run_info
    from cp_jax.jobs import post_train

    clone = _run(tmp_path / "clone", argv=("train_bc.py",))
    b1 = _run(tmp_path / "b1", init_from=clone, agent_steps=100.0)
    _run(tmp_path / "b2", init_from=b1, agent_steps=50.0)
    runs = run_info.lineage(str(tmp_path / "b2" / "policy"))
    assert [os.path.basename(r["run"]) for r in runs] == ["b2", "b1", "clone"]
    assert [r["agent_steps"] for r in runs] == [50.0, 100.0, 0.0]
    assert runs[1]["command"] == ["train_anchor.py", "--x=1"] and runs[2]["command"] == ["train_bc.py"]
    assert run_info.lineage_agent_steps(runs) == 150.0
    _run(tmp_path / "b3", init_from=str(tmp_path / "gone" / "policy"), agent_steps=7.0)
    lost = run_info.lineage(str(tmp_path / "b3"))
    assert lost[-1] == dict(run=str(tmp_path / "gone" / "policy"), missing=True)
    assert run_info.lineage_agent_steps(lost) == 7.0
    asset = tmp_path / "asset"
    _run(asset, agent_steps=50.0, policy=False)
    with open(asset / "eval.json", "w") as f:
        json.dump(dict(updates=10, agent_steps=50.0, lineage=runs, lineage_agent_steps=150.0), f)
    assert run_info.lineage(str(asset)) == runs
    assert post_train.anchor_steps(str(asset)) == 150.0  # the whole lineage
    assert post_train.anchor_steps(str(tmp_path / "b2")) == 50.0  # no recorded lineage: the run's own


def test_export_policy_writes_the_lineage(tmp_path):
    """launch.export_policy of a fine-tuned run: the exported eval.json holds the lineage and its
    total, the README lists every run with its command, curve.png spans both runs."""
    import json

    from cp_jax.policy import networks, saved
    from cp_jax.sim import types

    sim = types.SimConfig(max_agents=4, max_road_segments=64, max_lanes=4, obs_partners=3, obs_road=8, grid_size=4,
                          max_route_points=16, idm_lookahead=8)
    net = networks.NetConfig(set_width=4, trunk=(8,))
    base = _run(tmp_path / "base", agent_steps=2e6, argv=("train_anchor.py", "--workdir=base"))
    _run(tmp_path / "tune", init_from=base, agent_steps=2e5, argv=("train_anchor.py", "--workdir=tune"))
    for name, steps in (("base", 2e6), ("tune", 2e5)):
        with open(tmp_path / name / "metrics.jsonl", "w") as f:
            for i in (1, 2):
                f.write(json.dumps(dict(step=i, agent_steps=steps * i / 2, goal_rate=0.5, collision_rate=0.1,
                                        offroad_rate=0.1, timeout_rate=0.3, episode_return=1.0)) + "\n")
    saved.save(str(tmp_path / "tune" / "policy"), net, networks.init_params(net, sim, jax.random.PRNGKey(0)), sim)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "launch.export_policy", f"--workdir={tmp_path / 'tune'}",
                        f"--out={out}"], cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ev = json.loads((out / "eval.json").read_text())
    assert ev["lineage_agent_steps"] == 2.2e6
    assert [os.path.basename(x["run"]) for x in ev["lineage"]] == ["tune", "base"]
    assert (out / "curve.png").stat().st_size > 0  # the lineage's curve (the run itself drew none)
    readme = (out / "README.md").read_text()
    assert "python -m launch.train_anchor --workdir=base" in readme and "2.20 M simulated agent-steps" in readme, readme
    # Into a folder holding files: refused (one usage line) unless --overwrite, which replaces it whole.
    (out / "stale.txt").write_text("an earlier export's file")
    cmd = [sys.executable, "-m", "launch.export_policy", f"--workdir={tmp_path / 'tune'}", f"--out={out}"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "holds files" in r.stderr and "--overwrite" in r.stderr, r.stderr[-2000:]
    r = subprocess.run([*cmd, "--overwrite"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and not (out / "stale.txt").exists() and (out / "params.msgpack").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == ["out"]  # nothing staged left


def test_progress_bar_names_its_unit(capsys):
    """Training counts updates, behaviour cloning epochs, post-training agent-steps: each bar says which."""
    from cp_jax.io.metrics import Progress

    for unit in ("updates", "agent-steps"):
        with Progress(10, "job", unit=unit) as bar:
            bar.update(4)
        err = capsys.readouterr().err
        assert f" {unit}/s" in err and "40%" in err


def test_console_keeps_own_records_and_errors_only(tmp_path):
    """Under launch/ (console.quiet_libraries), a record logged from the project's code passes, one from
    elsewhere (this test file stands in for a library) does not unless it is an error."""
    import logging

    from absl import logging as absl_logging

    from cp_jax.io import console
    from cp_jax.io.metrics import read_jsonl

    kept = []

    class Spy(logging.Filter):
        def filter(self, record):
            kept.append(record.getMessage())
            return False  # nothing printed

    absl_logger = logging.getLogger("absl")
    saved = list(absl_logger.filters)
    absl_logger.filters[:] = [console.OwnRecords(), Spy()]
    try:
        (tmp_path / "bad.jsonl").write_text("{bad\n")
        read_jsonl(str(tmp_path / "bad.jsonl"))  # cp_jax/io/metrics.py warns about the unparsable line
        absl_logging.warning("library warning")
        absl_logging.error("library error")
    finally:
        absl_logger.filters[:] = saved
    assert len(kept) == 2 and "unparsable line 1" in kept[0] and kept[1] == "library error"
    assert console.asks_verbosity(["prog", "--verbosity=1"]) and console.asks_verbosity(["prog", "-v", "1"])
    assert not console.asks_verbosity(["prog", "--out=x"])


def test_console_prints_a_record_as_the_jobs_line():
    """quiet_libraries' formatter: an INFO record is its message alone, a warning says so; no absl prefix."""
    import logging

    from cp_jax.io import console

    fmt = console.JobLines("%(message)s")
    rec = lambda level: logging.LogRecord("absl", level, __file__, 1, "%d training scenes", (112,), None)  # noqa: E731
    assert fmt.format(rec(logging.INFO)) == "112 training scenes"
    assert fmt.format(rec(logging.WARNING)) == "warning: 112 training scenes"


def test_run_info_is_written_whole(tmp_path):
    """run_info.json goes to a .tmp and is renamed into place: a kill mid-write never leaves a half file that a
    resume would have to refuse."""
    import json

    import ml_collections

    from cp_jax.io.run_info import write_run_info

    path = write_run_info(str(tmp_path), ml_collections.ConfigDict(dict(a=1)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_info.json"]
    assert json.load(open(path))["config"] == {"a": 1}
