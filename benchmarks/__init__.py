"""fencedlake benchmarks: ``python -m benchmarks.run --quick|--full`` (see docs/benchmarks.md).

Every suite reports ratios against a baseline measured in the same run,
interleaved, and fails only on an exception or a wrong row count — never on a
wall-clock number (the machines running it are shared and noisy).
"""
