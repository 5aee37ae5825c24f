"""Codecs executors use too (PROTOCOL.md steps 2-3; no catalog code): data files, properties, filters, specs."""
