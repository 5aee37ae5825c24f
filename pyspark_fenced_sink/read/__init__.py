"""The executor read path: Iceberg data files to the Arrow batches Spark expects (no catalog code)."""
