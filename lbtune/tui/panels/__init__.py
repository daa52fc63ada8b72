"""The monitor's panels: each lays out its part of a `Frame` as a rich renderable."""
