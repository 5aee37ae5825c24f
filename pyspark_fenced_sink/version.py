"""The package version (one home, PROTOCOL.md §13: ``setup.cfg`` reads it here; bottom floor, imports nothing)."""

__version__ = "0.1.0.dev0"
