"""The export job behind `launch.export_policy`: a finished training run's policy copied into a
self-describing folder (e.g. assets/anchors/NAME).

    export(workdir, out)

The folder gets the policy (params.msgpack, net_config.json, sim_config.json), curve.png, eval.json,
metrics.jsonl and README.md with the exact command, git revision and held-out results taken from the
run's run_info.json / eval.json. For a fine-tune (config.init_from), eval.json gets the lineage (every
run it continued, cp_jax.io.run_info.lineage) and its total agent-steps, the README lists their
commands, and curve.png spans the whole lineage. The folder is written whole: staged beside `out` and
moved into place when complete; an existing `out` with files is refused unless overwrite (then replaced).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile

from cp_jax.io import run_info
from cp_jax.policy import saved


def export(workdir: str, out: str, overwrite: bool = False) -> None:
    """Copy workdir's policy and records into out (module docstring)."""
    src = os.path.join(workdir, "policy")
    saved.load(src)  # refuse a broken policy
    final = os.path.normpath(out)
    if os.path.isdir(final) and os.listdir(final) and not overwrite:
        raise ValueError(f"--out={out} holds files ({', '.join(sorted(os.listdir(final))[:4])}...); pass --overwrite "
                         "to replace the folder, or choose another --out")
    # Read before copying: --out may be the folder of a run this one started from.
    runs = run_info.lineage(workdir)
    curve = None
    if len(runs) > 1:  # the curve of the whole lineage replaces the last run's own
        from cp_jax.io import plots

        curve = plots.lineage_curve(runs, os.path.join(tempfile.mkdtemp(), "curve.png"))
    out = final + ".partial"  # staged here, moved into place at the end
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for name in saved.FILES:
        shutil.copy(os.path.join(src, name), out)
    for name in ("curve.png", "eval.json", "metrics.jsonl", "eval.jsonl", "run_info.json"):
        if os.path.exists(os.path.join(workdir, name)):
            shutil.copy(os.path.join(workdir, name), out)
    if curve is not None:
        shutil.move(curve, os.path.join(out, "curve.png"))
    ev_out = os.path.join(out, "eval.json")
    if os.path.exists(ev_out):  # the exported eval.json records the whole lineage (CounterPlay's budget reads it)
        with open(ev_out) as f:
            ev = json.load(f)
        ev.update(lineage=runs, lineage_agent_steps=run_info.lineage_agent_steps(runs))
        with open(ev_out, "w") as f:
            json.dump(ev, f, indent=2)
    with open(os.path.join(workdir, "run_info.json")) as f:
        info = json.load(f)
    argv = info["argv"]
    command = "python -m launch.train_anchor " + " ".join(shlex.quote(a) for a in argv[1:])
    lines = [f"# {os.path.basename(final)}", "",
             "Made by this project's own command (git revision " + info["git_revision"] + "):", "",
             "```bash", command, "```", ""]
    ev_path = os.path.join(workdir, "eval.json")
    if os.path.exists(ev_path):
        with open(ev_path) as f:
            ev = json.load(f)
        lines += [f"Held-out procedural scenes after {ev['updates']} updates "
                  f"({ev['agent_steps'] / 1e6:.2f} M controlled agent-steps), greedy actions:", "",
                  "| style | goal | collision | off-road | timeout | mean speed m/s | agents |",
                  "|---|---|---|---|---|---|---|"]
        for style, r in ev["styles"].items():
            lines.append(f"| {style} | {r['goal']:.3f} | {r['collision']:.3f} | {r['offroad']:.3f} | "
                         f"{r['timeout']:.3f} | {r['mean_speed']:.2f} | {r['agents']} |")
        lines.append("")
    if len(runs) > 1:
        lines += ["It continues earlier runs (newest first; eval.json's `lineage`, whose "
                  f"{run_info.lineage_agent_steps(runs) / 1e6:.2f} M simulated agent-steps in all are "
                  "what post-training budgets are a fraction of):", ""]
        for r in runs:
            if r.get("missing"):
                lines.append(f"- `{r['run']}` (not on disk at export)")
            else:
                module = os.path.splitext(os.path.basename(r["command"][0]))[0]
                cmd = " ".join(["python -m launch." + module] + [shlex.quote(a) for a in r["command"][1:]])
                lines.append(f"- `{r['run']}`: {r['updates']} updates, {r['agent_steps'] / 1e6:.2f} M agent-steps "
                             f"(revision {r['git_revision']}): `{cmd}`")
        lines.append("")
    lines += ["Training curve: curve.png (metrics.jsonl holds every logged update). "
              "Load with `cp_jax.policy.saved.load(folder)`.", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))
    old = final + ".old"  # the replaced folder stays whole until the new one is in place
    if os.path.exists(final):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(out, final)
    shutil.rmtree(old, ignore_errors=True)
    print(f"exported {src} -> {final}")
