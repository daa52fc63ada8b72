"""The `lbtune ipvs` command group."""
