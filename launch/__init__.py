"""Command-line entry points (`python -m launch.X`); every one prints its own lines, not library log
records, unless --verbosity is given (cp_jax/io/console.py), and reports bad input as one line with
exit code 2 (launch/cli.py)."""

import sys

from cp_jax.io import console

console.quiet_libraries(sys.argv)
