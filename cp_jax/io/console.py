"""What a launch command prints: its own lines and progress bars, not the libraries' log records.

    quiet_libraries(sys.argv)   # launch/__init__.py does this for every `python -m launch.X`

Unless the command line sets --verbosity (absl's flag), records of level below ERROR from code outside
this project (orbax's checkpoint-manager dumps, tensorflow-datasets' "Downloading and preparing
dataset", JAX's backend probing) are dropped; the project's own records and every error still show,
as plain lines (`JobLines`: the message, with "warning:" / "error:" in front where it is one) instead of
absl's "I1205 02:10:46.171532 140504042109824 scenes.py:127]" prefix.
"""

from __future__ import annotations

import logging
import os
import sys

PROJECT_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), d)
                     + os.sep for d in ("cp_jax", "launch", "benchmarks", "experiments"))
LIBRARY_LOGGERS = ("jax", "orbax", "tensorflow", "tensorflow_datasets", "grain", "array_record", "etils")


def _logging_dirs() -> tuple[str, ...]:
    import absl.logging

    return (os.path.dirname(logging.__file__) + os.sep, os.path.dirname(absl.logging.__file__) + os.sep)


class OwnRecords(logging.Filter):
    """Keeps a record if it is an error or was logged from this project's code. The caller is found on
    the stack (a filter runs inside the logging call): absl's records carry absl's own file as their
    pathname until its formatter looks the caller up."""

    def __init__(self):
        super().__init__()
        self._skip = _logging_dirs()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename.startswith(self._skip)
                                     or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        return frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(PROJECT_DIRS)


class JobLines(logging.Formatter):
    """A record as a job's line: its message, prefixed by its level when that is above INFO."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        return line if record.levelno <= logging.INFO else f"{record.levelname.lower()}: {line}"


def asks_verbosity(argv: list[str]) -> bool:
    return any(a.split("=")[0] in ("--verbosity", "-v", "--v") for a in argv[1:])


def quiet_libraries(argv: list[str]) -> bool:
    """Drop library records below ERROR unless argv sets --verbosity; returns whether it did."""
    if asks_verbosity(argv):
        return False
    import absl.logging

    own = OwnRecords()
    logging.getLogger("absl").addFilter(own)  # orbax, tensorflow-datasets and our own absl.logging calls
    absl.logging.get_absl_handler().setFormatter(JobLines("%(message)s"))
    for name in LIBRARY_LOGGERS:  # Python loggers of the libraries (and their children, by level)
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO / WARNING lines
    return True
