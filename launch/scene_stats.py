"""Scene statistics side by side: what a driving policy depends on, per scene set (cp_jax/jobs/scene_stats.py).

    python -m launch.scene_stats --procedural=112 --cache="real (validation)=runs/real_val" --out=runs/stats

--procedural=N: the anchor's N training scenes (procedural seeds 0..). --cache=name=folder (repeatable):
a converted scene cache. Writes scene_stats.json and scene_stats.png into --out; an --out already holding
scene_stats.json is refused (a usage error, exit 2) unless --overwrite.
"""

from __future__ import annotations

from absl import app, flags

from launch import cli

flags.DEFINE_integer("procedural", 112, "procedural training scenes to include (0: none)", lower_bound=0)
flags.DEFINE_list("kinds", [], "layout kinds the procedural scenes cycle through (default: the default cycle; "
                  "e.g. adding highway, as config.scenes.kinds)")
flags.DEFINE_multi_string("cache", [], "name=folder of a converted scene cache (repeatable)")
flags.DEFINE_string("out", None, "output folder")
flags.DEFINE_string("policy", "assets/anchors/conditioned_small", "whose SimConfig procedural scenes are built with")
flags.DEFINE_string("cache_dir", "~/.cache/cp_jax/scenes", "procedural scene cache")
flags.DEFINE_bool("overwrite", False, "replace the scene_stats.json an existing --out holds")
FLAGS = flags.FLAGS


def main(_):
    from cp_jax.jobs.scene_stats import check_out, scene_stats
    from cp_jax.policy import saved

    with cli.checking():
        check_out(FLAGS.out, FLAGS.overwrite)
    sets = {}
    if FLAGS.procedural:
        from cp_jax.scenarios.procedural.layouts import LAYOUT_KINDS

        extra = [k for k in FLAGS.kinds if k not in LAYOUT_KINDS]  # the default cycle plus these: "+highway"
        kinds = ("+" + "+".join(extra) if set(LAYOUT_KINDS) <= set(FLAGS.kinds) else "+".join(FLAGS.kinds))
        label = f"procedural ({FLAGS.procedural} training scenes{', ' + kinds if FLAGS.kinds else ''})"
        sets[label] = ("procedural", FLAGS.procedural, tuple(FLAGS.kinds))
    for spec in FLAGS.cache:
        name, _, folder = spec.rpartition("=")
        sets[name or folder] = ("cache", folder)
    if not sets:
        raise app.UsageError("give --procedural > 0 or at least one --cache")
    with cli.checking():
        summary = scene_stats(sets, FLAGS.out, saved.load(FLAGS.policy).sim, cache_dir=FLAGS.cache_dir,
                              overwrite=FLAGS.overwrite)
    for stat in next(iter(summary.values())):
        print(f"{stat:22s} " + "  ".join(f"{name}: p50 {s[stat]['p50']:.2f} p90 {s[stat]['p90']:.2f}"
                                         for name, s in summary.items()))
    print(f"wrote {FLAGS.out}/scene_stats.json, scene_stats.png")


if __name__ == "__main__":
    cli.run(main, required=("out",))
