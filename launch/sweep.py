"""Run every variant x seed of a sweep file, then the benchmark, then Tables I-V over seeds.

    python -m launch.sweep --config=experiments/sweep_small.py --out=runs/sweep

OUT/runs/VARIANT_sSEED: each post-training run (launch.post_train's outputs; finished runs are kept,
so re-running resumes the sweep). OUT/bench: the benchmark of the anchor and every run
(episodes.jsonl, summary.json, tables.md, figures; OUT/bench/deploy_STYLE: Table IV's other ego
styles). OUT/tables.md: Tables I and III (cp_jax.bench.report.method_tables), II and V
(variant_table) and IV (deployment_table), mean ± std over post-training seeds per variant.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import time

from absl import app, flags
from ml_collections import config_flags

flags.DEFINE_string("out", "runs/sweep", "output directory")
config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "sweep_small.py"),
    "sweep file (ml_collections); override fields with --config.FIELD=VALUE",
)
FLAGS = flags.FLAGS


def sweep_module(path: str | None = None):
    """The sweep file as a module (its VARIANTS and TABLE_* live beside get_config): the file --config
    names, or experiments/sweep_small.py."""
    if not path:
        return importlib.import_module("experiments.sweep_small")
    spec = importlib.util.spec_from_file_location("cp_jax_sweep_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_configs(config, sweep=None) -> dict[str, object]:
    """{VARIANT_sSEED: post-training ConfigDict} for the sweep's variants and seeds (sweep: the sweep
    file's module, default experiments/sweep_small.py)."""
    sweep = sweep or sweep_module()
    unknown = set(config.variants) - set(sweep.VARIANTS)
    if unknown:
        raise ValueError(f"config.variants: unknown {sorted(unknown)}; known: {sorted(sweep.VARIANTS)}")
    out = {}
    for name in config.variants:
        experiment, overrides = sweep.VARIANTS[name]
        for seed in config.seeds:
            c = importlib.import_module(f"experiments.{experiment}").get_config()
            c.anchor, c.budget_frac, c.budget_steps, c.seed = config.anchor, config.budget_frac, 0, int(seed)
            c.train.progress = False
            for dotted, value in overrides.items():
                section, field = dotted.split(".")
                c[section][field] = value
            out[f"{name}_s{seed}"] = c
    return out


def main(_):
    from cp_jax.bench import episodes, report
    from cp_jax.bench.harness import run_benchmark
    from cp_jax.counterplay import trainer
    from cp_jax.io.metrics import read_jsonl
    from cp_jax.io.run_info import write_run_info
    from cp_jax.policy import saved
    from cp_jax.sim import conditions

    config = FLAGS.config
    sweep = sweep_module(config_flags.get_config_filename(FLAGS["config"]))
    runs = run_configs(config, sweep)
    for c in runs.values():
        trainer.resolve(c)  # validates every run before any work
    b = config.bench
    for style in [*b.ego_styles, *b.deploy_styles]:
        conditions.style(style)  # raises, naming the style
    if "normal" not in b.ego_styles:
        raise ValueError("config.bench.ego_styles: Tables II and V read the normal ego style; include 'normal'")
    if b.deploy_styles and not set(b.deploy_splits) <= set(b.splits):
        raise ValueError(f"config.bench.deploy_splits {tuple(b.deploy_splits)} must be among config.bench.splits "
                         f"{tuple(b.splits)} (Table IV's normal column comes from the main benchmark)")
    regimes = list(episodes.REGIMES) if list(b.regimes) == ["all"] else list(b.regimes)
    write_run_info(FLAGS.out, config)
    t0 = time.time()
    for name, c in runs.items():
        work = os.path.join(FLAGS.out, "runs", name)
        if os.path.exists(os.path.join(work, "post_train.json")):
            continue
        print(f"[{time.time() - t0:6.0f}s] {name}", flush=True)
        trainer.post_train(c, work)

    print(f"[{time.time() - t0:6.0f}s] benchmark", flush=True)
    egos = [episodes.from_saved("anchor", saved.load(config.anchor))]
    egos += [episodes.from_saved(n, saved.load(os.path.join(FLAGS.out, "runs", n, "policy"))) for n in runs]
    traffic = {"anchor": episodes.from_saved("anchor", saved.load(config.anchor)),
               "ppo": episodes.from_saved("ppo", saved.load(b.ppo_policy)),
               "smart_bc": episodes.from_saved("smart_bc", saved.load(b.bc_policy))}
    first = next(iter(runs.values()))
    scenes = dict(kind="procedural", num_scenes=b.procedural_scenes, pairs=b.pairs, seed=b.procedural_seed,
                  agents=first.scenes.agents, cache_dir=first.scenes.cache_dir)
    bench = os.path.join(FLAGS.out, "bench")
    # Figures: the anchor (left) beside the first run (right) where that run completes an anchor failure.
    repaired = lambda clean: clean.get("anchor") is False and any(v for k, v in clean.items() if k != "anchor")  # noqa: E731
    run_benchmark(egos, traffic, regimes, list(b.splits), list(b.ego_styles), b.seeds, bench, scenes,
                  figures=b.figures, progress=False, figure_filter=repaired)
    records = read_jsonl(os.path.join(bench, "episodes.jsonl"))
    for style in b.deploy_styles:  # Table IV: the variants its rows name, under the other deployment styles
        wanted = {row[style] for _, row in sweep.TABLE_IV if style in row}
        deploy_egos = [e for e in egos if report.method_of(e.name) in wanted]
        if deploy_egos and style not in b.ego_styles:
            print(f"[{time.time() - t0:6.0f}s] benchmark, ego style {style}", flush=True)
            out = os.path.join(bench, f"deploy_{style}")
            run_benchmark(deploy_egos, traffic, regimes, list(b.deploy_splits), [style], b.seeds, out, scenes,
                          progress=False)
            records += read_jsonl(os.path.join(out, "episodes.jsonl"))
    text = "\n\n".join(tables(records, regimes, config, sweep))
    with open(os.path.join(FLAGS.out, "tables.md"), "w") as f:
        f.write(text)
    print(text)
    spent = {n: json.load(open(os.path.join(FLAGS.out, "runs", n, "post_train.json")))["agent_steps"] for n in runs}
    print(json.dumps(dict(agent_steps=spent, total_s=round(time.time() - t0)), indent=1))


def tables(records: list[dict], regimes: list[str], config, sweep=None) -> list[str]:
    """Tables I and III per ego style, II and V per split, IV per deployment split (Markdown blocks)."""
    from cp_jax.bench import report

    sweep = sweep or sweep_module()
    b = config.bench
    out = [report.method_tables(records, regimes, "anchor", s) for s in b.ego_styles]
    for split in b.splits:
        out.append(report.variant_table(records, regimes, list(sweep.TABLE_II), "Table II (components)", split))
        out.append(report.variant_table(records, regimes, list(sweep.TABLE_V), "Table V (styles searched)", split))
    if b.deploy_styles:
        styles = list(dict.fromkeys([*b.ego_styles, *b.deploy_styles]))
        out += [report.deployment_table(records, regimes, list(sweep.TABLE_IV), styles, s) for s in b.deploy_splits]
    return out


if __name__ == "__main__":
    app.run(main)
