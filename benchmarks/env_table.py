"""Runs env_throughput.py over batch sizes, sizes and XLA settings (one process each) and prints
a markdown table for docs/measurements/simulator.md.

    python benchmarks/env_table.py [--batches=1,8,32,128] [--sizes=128x20000,32x2000]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from absl import app, flags

flags.DEFINE_list("batches", ["1", "8", "32", "128"], "batch sizes")
flags.DEFINE_list("sizes", ["128x20000", "32x2000"], "AGENTSxROAD_POINTS")
flags.DEFINE_integer("steps", 80, "steps per rollout")
FLAGS = flags.FLAGS

SETTINGS = {
    "project default (YNN off, Eigen 1 thread)": {},
    "YNN off only": {"CP_JAX_KEEP_XLA_FLAGS": "1", "XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type="},
    "jax default": {"CP_JAX_KEEP_XLA_FLAGS": "1", "XLA_FLAGS": ""},
}


def main(_):
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    for size in FLAGS.sizes:
        agents, road = size.split("x")
        for batch in FLAGS.batches:
            for name, extra in SETTINGS.items():
                env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), **extra}
                cmd = [sys.executable, os.path.join(here, "env_throughput.py"), f"--agents={agents}",
                       f"--road_points={road}", f"--batch={batch}", f"--steps={FLAGS.steps}", "--json"]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                rows.append((agents, r["road_segments"], batch, name, r))
                print(f"{agents} agents, {r['road_segments']} segs, batch {batch}, {name}: "
                      f"{r['agent_steps_per_s']:,.0f}", file=sys.stderr)
    print("| agents | road segments | batch | XLA | agent-steps/s | compile s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for agents, segs, batch, name, r in rows:
        print(f"| {agents} | {segs} | {batch} | {name} | {r['agent_steps_per_s']:,.0f} | "
              f"{r['compile_s']:.1f} | {r['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    app.run(main)
