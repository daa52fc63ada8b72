"""`python -m lbtune` runs the command line."""

from lbtune.cli.main import main

main()
