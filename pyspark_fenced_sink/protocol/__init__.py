"""The Spark-free protocol core: WAL, fencing, reconciliation, the commit loop (docs/PROTOCOL.md)."""
