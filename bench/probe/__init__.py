"""The length-generalization probe (python -m bench.probe): which position encoding still
works past its training length, measured on small synthetic tasks (docs/probe.md)."""
