"""The jobs floor: drivers that wire the algorithms to files, one per command of launch/.

loop.py            the resumable loop every training job shares (run folder, checkpoints, logs, resume)
config.py          experiment ConfigDicts <-> the static dataclasses (one source of defaults)
scenes.py          the training and held-out scene banks of a config's scenes section
train.py           self-play PPO training (launch.train_anchor)
clone.py           behaviour cloning, the SMART stand-in (launch.train_bc)
post_train.py      post-training at a budget; the Method registry (launch.post_train)
benchmark.py       the benchmark (launch.evaluate)
main.py            the main job (launch.main)
sweep.py           every method x seed, then Tables I-V (launch.sweep)
evaluate_policy.py self-play evaluation of a saved policy (launch.evaluate_policy)
export_policy.py   a run's policy into a self-describing folder (launch.export_policy)
quickstart.py      the simulator with non-learned controllers (launch.quickstart)
convert.py         scene files into a scenario cache (launch.build_scenes)
make_splits.py     split manifests (launch.make_splits)
replay_logs.py     log-replay sanity check of real scenes (launch.replay_logs)

Nothing below this floor imports it.
"""
