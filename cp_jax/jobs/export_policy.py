"""The export job behind `launch.export_policy`: a finished training run's policy copied into a
self-describing folder (e.g. assets/anchors/NAME).

    export(workdir, out)

The folder gets the policy (params.msgpack, net_config.json, sim_config.json), curve.png, eval.json,
metrics.jsonl and README.md with the exact command, git revision and held-out results taken from the
run's run_info.json / eval.json. For a fine-tune (config.init_from), eval.json gets the lineage (every
run it continued, cp_jax.io.run_info.lineage) and its total agent-steps, the README lists their
commands, and curve.png spans the whole lineage. Every file it reads is checked first (a missing or damaged
run_info.json, eval.json or policy is refused naming the file, nothing written). The folder is written whole:
staged beside `out` and moved into place when complete; an existing `out` with files, or a file there, is
refused unless overwrite (then replaced).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil

from cp_jax.io import files, run_info
from cp_jax.policy import saved


def _read_json(path: str, what: str) -> dict:
    """The JSON object in path (a file of the run); ValueError naming it when missing or damaged."""
    try:
        with open(path) as f:
            value = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: missing ({what})") from None
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: unreadable ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: holds a {type(value).__name__}, expected an object ({what})")
    return value


def _run_info(workdir: str) -> dict:
    """workdir's run_info.json, checked to hold the command that made the run; ValueError naming it."""
    path = os.path.join(workdir, "run_info.json")
    info = _read_json(path, "written by the training run: its command and git revision")
    argv = info.get("argv")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"{path}: no 'argv' (the command that made the run, a list of strings), got {argv!r}")
    return info


def _readme(workdir: str, info: dict, final: str, runs: list[dict]) -> str:
    """README.md's text, from workdir's run_info.json (`info`) and eval.json; ValueError naming the file that
    lacks a field it needs."""
    argv = info["argv"]
    command = "python -m launch.train_anchor " + " ".join(shlex.quote(a) for a in argv[1:])
    lines = [f"# {os.path.basename(final)}", "",
             f"Made by this project's own command (git revision {info.get('git_revision', 'unknown')}):", "",
             "```bash", command, "```", ""]
    ev_path = os.path.join(workdir, "eval.json")
    if os.path.exists(ev_path):
        ev = _read_json(ev_path, "the run's held-out evaluation")
        try:
            lines += [f"Held-out procedural scenes after {ev['updates']} updates "
                      f"({ev['agent_steps'] / 1e6:.2f} M controlled agent-steps), greedy actions:", "",
                      "| style | goal | collision | off-road | timeout | mean speed m/s | agents |",
                      "|---|---|---|---|---|---|---|"]
            for style, r in ev["styles"].items():
                lines.append(f"| {style} | {r['goal']:.3f} | {r['collision']:.3f} | {r['offroad']:.3f} | "
                             f"{r['timeout']:.3f} | {r['mean_speed']:.2f} | {r['agents']} |")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{ev_path}: not a training run's evaluation (field {e} missing or of another "
                             "type)") from None
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
    return "\n".join(lines)


def export(workdir: str, out: str, overwrite: bool = False) -> None:
    """Copy workdir's policy and records into out (module docstring). Everything is read and checked before
    anything is written: a broken policy, a missing or damaged run_info.json / eval.json, an --out that holds
    files or is a file (without overwrite) raise ValueError naming the file."""
    src = os.path.join(workdir, "policy")
    saved.load(src)  # refuse a broken policy
    final = os.path.normpath(out)
    if os.path.exists(final) and not os.path.isdir(final) and not overwrite:
        raise ValueError(f"--out={out}: a file, not a folder; pass --overwrite to replace it, or choose another --out")
    if os.path.isdir(final) and os.listdir(final) and not overwrite:
        raise ValueError(f"--out={out} holds files ({', '.join(sorted(os.listdir(final))[:4])}...); pass --overwrite "
                         "to replace the folder, or choose another --out")
    # Read before copying: --out may be the folder of a run this one started from.
    info = _run_info(workdir)
    try:
        runs = run_info.lineage(workdir)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{workdir}: the runs it continues (config.init_from) are unreadable ({e})") from None
    readme = _readme(workdir, info, final, runs)
    staged = final + ".partial"  # staged here, moved into place when complete
    if os.path.isdir(staged):
        shutil.rmtree(staged)
    elif os.path.lexists(staged):
        os.remove(staged)
    os.makedirs(staged)
    try:
        for name in saved.FILES:
            shutil.copy(os.path.join(src, name), staged)
        for name in ("curve.png", "eval.json", "metrics.jsonl", "eval.jsonl", "run_info.json"):
            if os.path.exists(os.path.join(workdir, name)):
                shutil.copy(os.path.join(workdir, name), staged)
        if len(runs) > 1:  # the curve of the whole lineage replaces the last run's own
            from cp_jax.io import plots

            plots.lineage_curve(runs, os.path.join(staged, "curve.png"))
        ev_out = os.path.join(staged, "eval.json")
        if os.path.exists(ev_out):  # the exported eval.json records the whole lineage (CounterPlay's budget reads it)
            with open(ev_out) as f:
                ev = json.load(f)
            ev.update(lineage=runs, lineage_agent_steps=run_info.lineage_agent_steps(runs))
            with open(ev_out, "w") as f:
                json.dump(ev, f, indent=2)
        with open(os.path.join(staged, "README.md"), "w") as f:
            f.write(readme)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    files.move_into_place(staged, final)  # the replaced folder (or file) stays whole until the new one is in place
    print(f"exported {src} -> {final}")

