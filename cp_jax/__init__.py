"""cp_jax: a JAX driving simulator, reward-conditioned self-play and CounterPlay post-training.

Importing cp_jax sets two XLA CPU defaults before JAX starts its backends: jax 0.10's experimental
YNN fusion is turned off (`--xla_cpu_experimental_ynn_fusion_type=`) and Eigen's own thread pool
is not used (`--xla_cpu_multi_thread_eigen=false`); on the 2-core CPU both made the simulator
faster and far less noisy in benchmarks/env_throughput.py (see docs/measurements/simulator.md). They are only
added for the jaxlib series they were measured on, each only when XLA_FLAGS does not mention it
already, and not at all with CP_JAX_KEEP_XLA_FLAGS=1.
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
    for name, value in (("xla_cpu_experimental_ynn_fusion_type", ""), ("xla_cpu_multi_thread_eigen", "false")):
        if name not in flags:
            flags = f"{flags} --{name}={value}".strip()
    _os.environ["XLA_FLAGS"] = flags


_set_xla_defaults()
