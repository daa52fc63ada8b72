"""The `lbtune lab` command group."""
