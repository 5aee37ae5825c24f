"""Test support shipped with the package: a Spark-free write harness and a real-table invariant checker.

Used by the project's tests, integration suite and benchmarks; not a stable API.
"""
