"""Command line: parse, call the engine, render. Heavy modules are imported inside commands."""
