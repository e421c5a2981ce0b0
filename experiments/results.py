"""The results command's cells (issue #32): Table I's methods and the other paper-table variants (Tables
II, IV, V) post-trained from the shipped anchor at 1% (the paper's budget) and 5%, 3 seeds each, every run
benchmarked on the procedural TEST set (1,000 pairs per split, 2 benchmark seeds, the 8 regimes), and
Table I's methods on the real test scenes.

    python -m launch.results --out=results
    python -m launch.results --out=results --config.max_cells=4     # at most 4 new cells, then the tables

The variants and table rows are the sweep file's (experiments/sweep_small.py). Every choice is made
on the validation sets (launch.sweep, launch.evaluate); only this command reads the test sets
(docs/decisions.md, "Data roles").
"""

import ml_collections

from cp_jax.bench.config import BenchConfig
from cp_jax.jobs.config import section

TABLE_I = ("counterplay", "cp_no_gate", "ppo_continue", "ppo_rewind", "ppo_opponent", "spiced")


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.anchor = "assets/anchors/conditioned_small"
    c.sweep_file = ""  # the variants and table rows ("": experiments/sweep_small.py)
    c.budgets = (0.01, 0.05)  # of the anchor's training transitions, every run
    c.seeds = (3, 4, 5)  # post-training seeds: not the tuning sweep's (0, 1, 2), whose runs chose the settings
    c.table_i = TABLE_I  # at every budget
    c.variants = ("aggressive_distill", "cautious_distill", "no_backtrack", "no_style", "no_verify", "no_deploy",
                  "fixed10", "fixed50", "value30", "deploy_halfway", "deploy_aggressive", "only_cautious",
                  "only_cautious_normal", "only_normal", "only_normal_aggressive", "only_aggressive")
    c.variant_budgets = (0.01, 0.05)  # the budgets at which `variants` run too (0.01 since session 44)
    c.bench = section(BenchConfig, exclude=("anchor_policy", "cache_dir"), scenes="procedural_test", pairs=1000,
                      procedural_scenes=300, seeds=2)
    # Where every cell's procedural scenes are cached ("": built in memory, no TFDS, as on the accelerator
    # image); not part of any cell's config, so cells made with and without a cache join one table.
    c.cache_dir = "~/.cache/cp_jax/scenes"
    # Table IV: these ego styles too, for the variants TABLE_IV names, on these splits (() skips it).
    c.deploy = ml_collections.ConfigDict(dict(styles=("halfway", "aggressive"), splits=("interactive",)))
    # Table I on real scenes: a converted cache of the real TEST files with its split manifests
    # (python -m launch.build_scenes --src=../shared/data/womd_json --files=0:10 --out=DIR, then
    # python -m launch.make_splits ... --out=DIR/splits); "" leaves the real cells out.
    c.real = ml_collections.ConfigDict(dict(scenes="", manifests="", splits=("random",),
                                            regimes=("expert", "idm", "normal", "ppo", "smart_bc"),
                                            variants=TABLE_I))
    c.n_boot = 2000  # bootstrap resamples of each paired interval
    c.max_cells = 0  # stop after this many new cells (0: every cell); the CPU work spreads over sessions
    c.only = ()  # run only the cells whose path starts with one of these (e.g. ("bench/anchor",)); () = all
    # (a cell's result depends only on its own config: changing max_cells, or adding seeds, budgets or variants,
    # keeps every finished cell)
    return c
