"""Helpers shared by test modules: the suite's XLA flags for subprocess tests, and the comparison of
two separately compiled programs' results.

The suite compiles with XLA's CPU fusion emitters off (tests/conftest.py: about a third less compile
time). Two *different* programs computing the same thing (a replay from a snapshot vs the recording,
IDM compiled in vs out, agent rows vs the full matrix) then agree to float rounding rather than bit
for bit: XLA fuses them differently. `assert_same` asserts exactly that — integers and booleans (steps,
events, partners, masks) equal, floats to rtol 1e-5 / atol 1e-6 (the differences seen are 1e-8 to 4e-7)
— a wrong rule still fails it by far more.
A run compared with its own resumed copy (the same programs) is still compared byte for byte.
"""

from __future__ import annotations

import os

import numpy as np

TEST_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false"


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for a subprocess test on `devices` host devices: the session's flags plus the count."""
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                     if not f.startswith("--xla_force_host_platform_device_count"))
    return f"{flags} --xla_force_host_platform_device_count={devices}".strip()


def assert_same(actual, desired, err_msg: str = "") -> None:
    """Equal integers / booleans, floats equal to rounding (rtol 1e-5, atol 1e-6)."""
    actual, desired = np.asarray(actual), np.asarray(desired)
    if np.issubdtype(desired.dtype, np.floating):
        np.testing.assert_allclose(actual, desired, rtol=1e-5, atol=1e-6, err_msg=err_msg)
    else:
        np.testing.assert_array_equal(actual, desired, err_msg=err_msg)
