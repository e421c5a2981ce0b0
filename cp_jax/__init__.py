"""cp_jax: a JAX driving simulator, reward-conditioned self-play and CounterPlay post-training.

Importing cp_jax sets one XLA CPU default before JAX starts its backends: jax 0.10's experimental
YNN fusion is turned off (`--xla_cpu_experimental_ynn_fusion_type=`), which made the simulator
1.2-1.8x faster on CPU in benchmarks/env_throughput.py (see BUILD_NOTES.md). It is only added
for the jaxlib series it was measured on, only when XLA_FLAGS does not mention the flag already,
and not at all with CP_JAX_KEEP_XLA_FLAGS=1.
"""

import os as _os


def _set_xla_defaults() -> None:
    if _os.environ.get("CP_JAX_KEEP_XLA_FLAGS") == "1":
        return
    try:
        from importlib.metadata import version

        jaxlib_version = version("jaxlib")
    except Exception:  # noqa: BLE001 - no jaxlib metadata: leave the flags alone
        return
    if not jaxlib_version.startswith("0.10."):
        return
    flags = _os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_experimental_ynn_fusion_type" not in flags:
        _os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_experimental_ynn_fusion_type=").strip()


_set_xla_defaults()
