"""Options, above the core: every key and default declared once, next to its validation (PROTOCOL.md step 0, §13).

``common`` (table names, values), ``catalog`` (``CatalogConfig``), ``write``
(``SinkOptions``) and ``read`` (``ReadOptions``) parse once and hand the core typed
values. The README's option tables are the users' reference.
"""
