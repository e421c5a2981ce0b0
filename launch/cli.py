"""Usage errors of every `python -m launch.X` as one line (issue #33): an unknown or badly typed flag, an
unknown --config.FIELD, a config file that does not load, a missing required flag, stray arguments, or a
value the job's validation refuses print `launch.X: error: MESSAGE` on stderr (the flag or field, and
what it accepts) and exit with code 2: no traceback, no flag list.

    config_file("experiments/counterplay.py", "experiment file ...")  # config_flags.DEFINE_config_file("config", ...)

    def main(_):
        with checking():                      # ValueError / FileNotFoundError here: the user's input
            setup = job.resolve(FLAGS.config)
        ...                                   # app.UsageError raised anywhere in main: the same line

    if __name__ == "__main__":
        run(main, required=("workdir",))      # instead of app.run(main)

Bad input met later, during the work (a damaged cache, checkpoint or scene file: ValueError or OSError
raised by the code that read it, naming the file and field), is one line too, with exit code 1; its
traceback is saved to a file the line names (a bug that raises one of these stays debuggable), or shown
with --verbosity.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback
from typing import NoReturn

import ml_collections
from absl import app, flags
from ml_collections import config_flags

EXIT_USAGE = 2
FLAGS = flags.FLAGS
_CONFIGS: dict[str, str] = {}  # config flag name -> its default file
# ml_collections applies --NAME.FIELD overrides to the default file while the flag is defined (at import):
# what that raised, reported by run() instead of a traceback from the import.
_DEFINE_ERRORS: dict[str, Exception] = {}


def program() -> str:
    """`launch.X` under `python -m`, else the script's file name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else os.path.basename(sys.argv[0])


def one_line(message: str) -> str:
    """A (possibly multi-line) message as one line: its first line, and its last when they differ (a
    wrapped traceback ends with the exception)."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0].rstrip(':')}: {lines[-1]}"


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `launch.X: error: MESSAGE` (one line) on stderr and exit with `code` (usage errors: EXIT_USAGE)."""
    sys.stderr.write(f"{program()}: error: {one_line(message)}\n")
    sys.stderr.flush()
    sys.exit(code)


def fail_with_traceback(e: BaseException, code: int = 1) -> NoReturn:
    """fail(e) with `code`, its traceback saved to a temporary file that the line names."""
    with tempfile.NamedTemporaryFile("w", prefix="cp_jax_error_", suffix=".txt", delete=False) as f:
        traceback.print_exception(e, file=f)
    fail(f"{one_line(str(e)) or type(e).__name__} (traceback: {f.name})", code)


@contextlib.contextmanager
def checking():
    """Inside, ValueError and FileNotFoundError (the job validating its flags / config before any work)
    become usage errors."""
    try:
        yield
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None


def config_file(default: str, help_string: str, name: str = "config") -> None:
    """config_flags.DEFINE_config_file(name, default, help_string); a bad --NAME.FIELD on the command line
    that ml_collections meets already here is kept for run() to report."""
    _CONFIGS[name] = default
    try:
        config_flags.DEFINE_config_file(name, default, help_string)
    except Exception as e:  # the retry below tells a bad override from a broken default file (which raises again)
        _DEFINE_ERRORS[name] = e
        config_flags.DEFINE_config_file(name, default, help_string, sys_argv=[])


def _config_arg(argv: list[str], name: str) -> str | None:
    """The value of --NAME (either `--NAME=X` or `--NAME X`) in argv, else None."""
    for i, arg in enumerate(argv[1:], 1):
        for prefix in (f"--{name}", f"-{name}"):
            if arg == prefix and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(prefix + "="):
                return arg.split("=", 1)[1]
    return None


def _overrides(argv: list[str], name: str) -> list[tuple[str, str]]:
    """(FIELD.PATH, the argument) for every --NAME.FIELD.PATH[=VALUE] in argv."""
    out = []
    for arg in argv[1:]:
        for prefix in (f"--{name}.", f"-{name}.", f"--no{name}.", f"-no{name}."):
            if arg.startswith(prefix):
                out.append((arg[len(prefix):].split("=", 1)[0], arg))
    return out


def override_error(config, argv: list[str], name: str = "config") -> str | None:
    """The first --NAME.FIELD in argv that `config` has no field for, as a message naming the known
    fields; None when every override names a field."""
    for path, arg in _overrides(argv, name):
        node, walked = config, name
        for key in path.split("."):
            if not isinstance(node, ml_collections.ConfigDict) or key not in node:
                if not isinstance(node, ml_collections.ConfigDict):
                    return f"{arg.split('=')[0]}: {walked} is a value, not a section"
                return f"{arg.split('=')[0]}: {walked} has no field {key!r}; its fields: {', '.join(sorted(node))}"
            node, walked = node[key], f"{walked}.{key}"
    return None


def _load(argv: list[str], name: str):
    """The config --NAME names in argv (or the default file); fails naming the file when it does not load."""
    path = _config_arg(argv, name) or _CONFIGS[name]
    if not os.path.isfile(path.split(":", 1)[0]):
        fail(f"--{name}={path}: no such file (an experiment file, e.g. {os.path.relpath(_CONFIGS[name])})")
    try:
        config = FLAGS[name].parser.parse(path)
    except Exception as e:  # whatever the file raised, it is the file that is named
        fail(f"--{name}={path}: does not load ({one_line(e)})")
    if not isinstance(config, ml_collections.ConfigDict):
        fail(f"--{name}={path}: does not load (get_config() returned {type(config).__name__})")
    return config


def _own_flags() -> list[str]:
    """The flags this command defines (its module's and the launch package's)."""
    main = sys.argv[0]
    return sorted({f.name for module, fs in FLAGS.flags_by_module_dict().items()
                   if module == main or module.startswith("launch.") for f in fs if "." not in f.name})


def _flag_error(e: Exception, argv: list[str]) -> str:
    """A message for what parsing argv raised: the unknown flag and this command's flags; the unknown
    config field and its section's fields; the badly typed config field and its type; else the error."""
    if isinstance(e, flags.UnrecognizedFlagError) and e.flagname.split(".")[0] not in _CONFIGS:
        return (f"--{e.flagname}: unknown flag; this command's flags: "
                + ", ".join(f"--{n}" for n in _own_flags()) + " (--helpshort describes them)")
    for name in _CONFIGS:
        config = _load(argv, name)
        message = override_error(config, argv, name)
        if message:
            return message
        for path, arg in _overrides(argv, name):
            if isinstance(e, flags.IllegalFlagValueError) and f"--{name}.{path}=" in str(e):
                default = config
                for key in path.split("."):
                    default = default[key]
                return (f"{arg}: {name}.{path} takes {type(default).__name__} values (default {default!r}); "
                        f"{one_line(str(e).split(': ', 1)[-1])}")
    return one_line(e)


def _parse(argv: list[str]) -> list[str]:
    """absl's flags_parser: FLAGS(argv), every failure a usage error."""
    for name, e in _DEFINE_ERRORS.items():
        fail(override_error(FLAGS[name].value, argv, name) or _flag_error(e, argv))
    try:
        args = FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError, SyntaxError, ImportError,
            NameError) as e:  # ml_collections' overrides, and a --config file that does not load
        fail(_flag_error(e, argv))
    for name in _CONFIGS:
        if not isinstance(FLAGS[name].value, ml_collections.ConfigDict):  # a file that did not load
            _load(argv, name)
    return args


def run(main, required: tuple[str, ...] = ()) -> None:
    """app.run(main) with usage errors as one line and exit code 2 (module docstring). required: flags
    that must be given a non-empty value."""

    def checked_main(argv):
        if len(argv) > 1:
            fail(f"unexpected arguments {argv[1:]}: every input is a --flag (--helpshort lists them)")
        for name in required:
            if FLAGS[name].value in (None, ""):
                fail(f"--{name}: required ({FLAGS[name].help})")
        from cp_jax.io.console import asks_verbosity
        from cp_jax.jobs.loop import Diverged

        try:
            return main(argv)
        except app.UsageError as e:
            fail(str(e))
        except Diverged as e:  # the run stopped itself, its last good checkpoint kept: no traceback to read
            fail(str(e), code=1)
        except (ValueError, OSError) as e:  # bad input met during the work (module docstring)
            if asks_verbosity(sys.argv):
                raise
            fail_with_traceback(e)

    app.run(checked_main, flags_parser=_parse)
