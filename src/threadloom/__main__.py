"""`python -m threadloom` runs the command line."""

from threadloom.cli import run

run()
