"""The Iceberg adapter (PROTOCOL.md §13), split by where code runs.

``catalogs`` (driver: load, create, open), ``commit/`` (driver: the one catalog
commit), ``codec/`` (executors too: data-file and property codecs), ``planning/``
(driver: read planning).
"""
