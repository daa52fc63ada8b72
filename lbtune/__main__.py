"""`python -m lbtune` runs the command line."""

from lbtune.cli.entry import main

main()
