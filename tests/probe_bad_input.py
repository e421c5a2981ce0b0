"""Issue #33's probes of the command-line tools, as a careful new user would run them: bad scene files, bad
flags and configs, damaged policies, reused output folders, resumes under another config, a diverging run.
Each runs the real command in a subprocess on generated data and prints one line: PASS / FAIL, the probe,
the exit code and the tool's own (last) error line. Exit code 1 if any probe did not answer as expected.

    JAX_PLATFORMS=cpu python -m tests.probe_bad_input            # ~4 min on a 2-core CPU
    JAX_PLATFORMS=cpu python -m tests.probe_bad_input --only=vertex,resume_lr

(Not collected by pytest: each row also has a unit test, named in the issue's notes.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = ["launch.build_scenes", "--max_agents=8", "--max_road_segments=256", "--max_lanes=8"]
TINY = ["--config.scenes.train=2", "--config.scenes.eval=0", "--config.scenes.agents=3", "--config.sim.max_agents=8",
        "--config.sim.max_road_segments=2048", "--config.sim.obs_road=16", "--config.ppo.num_envs=2",
        "--config.ppo.rollout_steps=15", "--config.ppo.num_minibatches=2", "--config.train.ckpt_every=2",
        "--config.train.progress=False"]


class Probe(NamedTuple):
    name: str
    what: str  # the row
    argv: list[str]  # python -m ARGV...
    exit: str  # "0", "1", "2" or "!0" (any failure)
    says: str  # a substring of stdout + stderr
    check: object = None  # () -> "" when the files are as they must be, else what is wrong
    kill_when: str = ""  # SIGKILL the command once this path exists (an interrupted run)


def _data(tmp: str) -> None:
    """The bad scene files (tests/test_bad_scene_input.py's generators), a damaged policy."""
    from tests.test_bad_scene_input import _bad_scenes
    from tests.test_readers import _scene_json

    for stem, scene, _ in _bad_scenes():
        for folder in (stem, "all_bad"):
            os.makedirs(os.path.join(tmp, folder), exist_ok=True)
            with open(os.path.join(tmp, folder, f"{stem}.json"), "w") as f:
                json.dump(scene, f)
    with open(os.path.join(tmp, "vertex", "good.json"), "w") as f:
        json.dump(_scene_json(), f)
    os.makedirs(os.path.join(tmp, "crowd"))
    with open(os.path.join(tmp, "crowd", "tiny.json"), "w") as f:
        json.dump(_scene_json(), f)  # 4 objects
    shutil.copytree(os.path.join(ROOT, "assets/anchors/ppo_small"), os.path.join(tmp, "wide"))
    with open(os.path.join(tmp, "wide", "sim_config.json")) as f:
        sim = json.load(f)
    with open(os.path.join(tmp, "wide", "sim_config.json"), "w") as f:
        json.dump(dict(sim, max_agents=32), f)
    shutil.copytree(os.path.join(ROOT, "assets/anchors/ppo_small"), os.path.join(tmp, "nan_policy"))
    from flax import serialization

    path = os.path.join(tmp, "nan_policy", "params.msgpack")
    with open(path, "rb") as f:
        params = serialization.msgpack_restore(f.read())
    import jax
    import numpy as np

    with open(path, "wb") as f:
        f.write(serialization.msgpack_serialize(jax.tree.map(lambda a: np.full_like(a, np.nan), params)))
    open(os.path.join(tmp, "a_file"), "w").close()
    shutil.copytree(os.path.join(ROOT, "assets/anchors/ppo_small"), os.path.join(tmp, "damaged"))
    with open(os.path.join(tmp, "damaged", "params.msgpack"), "r+b") as f:
        f.truncate(1000)


def _same(path: str, before: bytes):
    return lambda: "" if open(path, "rb").read() == before else f"{path} changed"


def probes(tmp: str) -> list:
    """[Probe or (name, setup() -> Probe)]: the setups run earlier commands (a tiny run, an evaluation)."""
    t = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    ev = ["launch.evaluate", "--policy=idm", "--regimes=idm", "--pairs=3", "--procedural_scenes=2", "--seeds=1",
          "--splits=random", f"--cache_dir={t('scenes')}", "--noprogress"]
    train = ["launch.train_anchor", *TINY, f"--config.scenes.cache_dir={t('scenes')}"]

    def evaluated():
        _run([*ev, f"--out={t('ev')}"])
        before = open(t("ev", "episodes.jsonl"), "rb").read()
        return Probe("evaluate_out", "launch.evaluate into an existing --out", [*ev, f"--out={t('ev')}"], "2",
                     "holds an earlier evaluation", _same(t("ev", "episodes.jsonl"), before))

    def killed():
        if not os.path.exists(t("ev", "episodes.jsonl")):
            _run([*ev, f"--out={t('ev')}"])
        before = {n: open(t("ev", n), "rb").read() for n in ("episodes.jsonl", "summary.json", "tables.md")}

        def same():
            return "; ".join(f"{n} changed" for n, b in before.items() if open(t("ev", n), "rb").read() != b)
        return Probe("evaluate_killed", "launch.evaluate --overwrite into an earlier evaluation, killed mid-run",
                     [*ev, "--overwrite", f"--out={t('ev')}"], "-9", "", same,
                     kill_when=t("ev", ".partial", "pairs.json"))

    def truncated_cache():
        if not os.path.exists(t("o2", "sim_config.json")):
            _run([*BUILD, f"--src={t('vertex')}", f"--out={t('o2')}"])
        shutil.copytree(t("o2"), t("c_trunc"))
        records = [os.path.join(d, n) for d, _, ns in os.walk(t("c_trunc")) for n in ns if "array_record" in n]
        with open(records[0], "r+b") as f:
            f.truncate(os.path.getsize(records[0]) // 2)
        return Probe("cache_truncated", "make_splits on a scene cache whose record file is truncated",
                     ["launch.make_splits", "--format=cache", f"--src={t('c_trunc')}", f"--out={t('ms_trunc')}"],
                     "!0", "is damaged", lambda: f"{t('ms_trunc')} written" if os.path.exists(t("ms_trunc")) else "")

    def splits_made():
        _run(["launch.make_splits", f"--src={t('vertex')}", f"--out={t('ms')}"])
        before = open(t("ms", "random.csv"), "rb").read()
        return Probe("splits_out", "make_splits into an --out that holds manifests",
                     ["launch.make_splits", f"--src={t('vertex')}", f"--out={t('ms')}"], "2", "already holds",
                     _same(t("ms", "random.csv"), before))

    def exported_workdir():
        shutil.copytree(os.path.join(ROOT, "assets/anchors/ppo_small"), t("exported"))
        return Probe("workdir_foreign", "train_anchor with --workdir = an exported policy folder",
                     [*train, "--config.train.total_updates=2", f"--workdir={t('exported')}"], "!0",
                     "holds files that are not a run's",
                     lambda: "" if sorted(os.listdir(t("exported"))) == sorted(
                         os.listdir(os.path.join(ROOT, "assets/anchors/ppo_small"))) else "files added or removed")

    def trained():
        _run([*train, "--config.train.total_updates=2", f"--workdir={t('run')}"])
        return open(t("run", "run_info.json"), "rb").read()

    def resume(name, what, flag, says):
        def setup():
            info = trained() if not os.path.exists(t("run", "run_info.json")) else open(t("run", "run_info.json"),
                                                                                          "rb").read()
            return Probe(name, what, [*train, "--config.train.total_updates=2", flag, f"--workdir={t('run')}"], "2",
                         says, _same(t("run", "run_info.json"), info))
        return name, setup

    return [
        Probe("strings", "a scene whose `valid` holds strings", [*BUILD, f"--src={t('strings')}", f"--out={t('o1')}"],
              "1", "'true' is a string, expected true / false"),
        Probe("vertex", "one lane vertex at x = 1e12 (and a good file beside it)",
              [*BUILD, f"--src={t('vertex')}", f"--out={t('o2')}"], "0", "is outside ±1e+06 m",
              lambda: "" if os.path.exists(t("o2", "report.json")) else "no report.json"),
        Probe("far", "an object at x = 1e12", [*BUILD, f"--src={t('far')}", f"--out={t('o3')}"], "1",
              "objects[1].position[90].x': 1e+12 is outside"),
        Probe("all_bad", "build_scenes with every file bad", [*BUILD, f"--src={t('all_bad')}", f"--out={t('o4')}"],
              "1", "no scene converted"),
        Probe("replay_src", "replay_logs with a missing --src",
              ["launch.replay_logs", f"--src={t('nope')}", f"--out={t('o5')}"], "2", "not a folder"),
        Probe("one_step", "a 1-step log", [*BUILD, f"--src={t('one_step')}", f"--out={t('o6')}"], "1",
              "log has 1 step"),
        ("evaluate_out", evaluated),
        ("evaluate_killed", killed),
        Probe("max_agents", "a policy whose sim_config.max_agents differs (procedural benchmark)",
              [*ev[:1], f"--policy=wide={t('wide')}", *ev[2:], f"--out={t('ev_wide')}"], "0",
              "not the policy's max_agents=32"),
        Probe("replay_truncated", "replay_logs on a scene with more objects than --max_agents",
              ["launch.replay_logs", f"--src={t('crowd')}", "--max_agents=2", "--max_road_segments=256",
               f"--out={t('o7')}"], "0", "4 objects > max_agents=2: 2 not replayed (ids",
              lambda: "" if json.load(open(t("o7", "replay.json")))["scenes"][0]["truncated_ids"] else
              "replay.json lists no truncated ids"),
        Probe("replay_nothing", "replay_logs with every file bad", ["launch.replay_logs", f"--src={t('all_bad')}",
                                                                    f"--out={t('o8')}"], "1", "no scene replayed"),
        resume("resume_lr", "resuming train_anchor with a changed --config.ppo.lr", "--config.ppo.lr=5e-4",
               "config.ppo.lr: 0.001 in the run, 0.0005 now"),
        resume("resume_envs", "resuming with a changed num_envs", "--config.ppo.num_envs=4",
               "config.ppo.num_envs: 2 in the run, 4 now"),
        Probe("budget", "post_train --config.budget_steps=-5",
              ["launch.post_train", f"--workdir={t('pt')}", "--config.budget_steps=-5"], "2",
              "config.budget_steps must be >= 0", lambda: f"{t('pt')} created" if os.path.exists(t("pt")) else ""),
        Probe("damaged", "a truncated params.msgpack", ["launch.evaluate_policy", f"--policy={t('damaged')}"], "2",
              "damaged, not a complete flax msgpack file"),
        Probe("unknown_field", "an unknown --config.FIELD",
              ["launch.post_train", f"--workdir={t('pt')}", "--config.nonexistent=1"], "2",
              "config has no field 'nonexistent'"),
        Probe("bad_value", "an invalid --config value",
              ["launch.post_train", f"--workdir={t('pt')}", "--config.budget_steps=abc"], "2",
              "config.budget_steps takes int values"),
        Probe("diverged", "training that diverges (NaN loss / parameters)",
              [*train, "--config.train.total_updates=4", "--config.ppo.lr=1e12", f"--workdir={t('nan')}"], "!0",
              "non-finite", lambda: f"{t('nan')}/policy written" if os.path.exists(t("nan", "policy")) else ""),
        # Beyond the table: the red-team probes of session 33, one per cause.
        Probe("out_is_file", "build_scenes with --out naming an existing file",
              [*BUILD, f"--src={t('vertex')}", f"--out={t('a_file')}"], "!0", "a_file"),
        ("cache_truncated", truncated_cache),
        ("splits_out", splits_made),
        ("workdir_foreign", exported_workdir),
        Probe("nan_policy", "a policy whose parameters are NaN", ["launch.evaluate_policy",
                                                                   f"--policy={t('nan_policy')}"], "2",
              "non-finite parameters"),
        Probe("multihost", "train_anchor --num_processes=2 --process_id=5 (no coordinator)",
              [*train, "--num_processes=2", "--process_id=5", f"--workdir={t('mh')}"], "2", "--process_id",
              lambda: f"{t('mh')} created" if os.path.exists(t("mh")) else ""),
        Probe("empty_regimes", "launch.evaluate --regimes= (none)", [*ev[:2], "--regimes=", *ev[3:],
                                                                      f"--out={t('ev_none')}"], "2",
              "name at least one regime"),
        Probe("results_only", "launch.results --config.only naming no cell",
              ["launch.results", f"--out={t('res')}", "--config.only=('bogus/cell',)"], "!0", "select no cell",
              lambda: f"{t('res')} written" if os.path.exists(t("res", "run_info.json")) else ""),
        Probe("sim_params", "SimParams with actuator_lag 0",
              ["-c", "from cp_jax.sim import types; types.default_params(actuator_lag=0)"], "!0",
              "SimParams.actuator_lag must be in (0, 1]"),
        Probe("sim_lat_accel", "SimParams with max_lat_accel <= 0",
              ["-c", "from cp_jax.sim import types; types.default_params(max_lat_accel=0)"], "!0",
              "SimParams.max_lat_accel must be > 0"),
        Probe("sim_grid", "SimParams with an even action grid (no keep-driving action in the middle)",
              ["-c", "from cp_jax.sim import types; types.default_params(num_accel=6)"], "!0",
              "num_accel must be an odd int >= 3"),
    ]


def _run(argv: list[str], kill_when: str = "") -> subprocess.CompletedProcess:
    """argv run in a subprocess (python -m ARGV, or python -c CODE); with kill_when, SIGKILLed half a second
    after that path appears (returncode -9)."""
    cmd = [sys.executable, *(argv if argv[0] == "-c" else ["-m", *argv])]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"), PYTHONPATH=ROOT)
    if not kill_when:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 900
        while proc.poll() is None and not os.path.exists(kill_when) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        proc.kill()
        proc.wait()
        log.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, log.read(), "")


def _last_error(text: str) -> str:
    """The output's last line that is not an absl INFO / WARNING record."""
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith(("I1", "W1"))]
    return lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated probe names (default: all)")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        _data(tmp)
        for item in probes(tmp):
            name = item.name if isinstance(item, Probe) else item[0]
            if only and name not in only:
                continue
            probe = item if isinstance(item, Probe) else item[1]()
            res = _run(probe.argv, probe.kill_when)
            text = res.stdout + res.stderr
            code_ok = res.returncode != 0 if probe.exit == "!0" else str(res.returncode) == probe.exit
            problem = "" if probe.check is None else probe.check()
            ok = code_ok and probe.says in text and not problem
            failed += not ok
            why = "" if ok else f" [expected exit {probe.exit} and '{probe.says}'{'; ' + problem if problem else ''}]"
            shown = next((line for line in text.splitlines() if probe.says in line), "") or _last_error(text)
            if probe.kill_when:
                shown = "SIGKILLed mid-run; " + (problem or "the files checked are as before")
            print(f"{'PASS' if ok else 'FAIL'} {probe.name}: {probe.what} -> exit {res.returncode}: "
                  f"{shown.strip()[:160]}{why}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
