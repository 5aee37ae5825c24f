"""The executor data path: Arrow batches to Iceberg Parquet data files (no catalog code)."""
