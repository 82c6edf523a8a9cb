"""The CI timing gate: a pytest-benchmark suite of fixed CPU points (suite.py) and the
comparison of its results with a committed baseline (gate.py). `python -m bench.regress`."""
