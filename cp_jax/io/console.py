"""What a launch command prints: its own lines and progress bars, not the libraries' log records.

    quiet_libraries(sys.argv)   # launch/__init__.py does this for every `python -m launch.X`

Unless the command line sets --verbosity (absl's flag), records of level below ERROR from code outside
this project (orbax's checkpoint-manager dumps, tensorflow-datasets' "Downloading and preparing
dataset", JAX's backend probing) are dropped; the project's own records and every error still show.
"""

from __future__ import annotations

import logging
import os

PROJECT_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), d)
                     + os.sep for d in ("cp_jax", "launch", "benchmarks", "experiments"))
LIBRARY_LOGGERS = ("jax", "orbax", "tensorflow", "tensorflow_datasets", "grain", "array_record", "etils")


class OwnRecords(logging.Filter):
    """Keeps a record if it is an error or was logged from this project's code."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or os.path.abspath(record.pathname).startswith(PROJECT_DIRS)


def asks_verbosity(argv: list[str]) -> bool:
    return any(a.split("=")[0] in ("--verbosity", "-v", "--v") for a in argv[1:])


def quiet_libraries(argv: list[str]) -> bool:
    """Drop library records below ERROR unless argv sets --verbosity; returns whether it did."""
    if asks_verbosity(argv):
        return False
    own = OwnRecords()
    logging.getLogger("absl").addFilter(own)  # orbax, tensorflow-datasets and our own absl.logging calls
    for name in LIBRARY_LOGGERS:  # Python loggers of the libraries (and their children, by level)
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO / WARNING lines
    return True
