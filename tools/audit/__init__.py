"""The compile audit: every kernel a GPU run launches, compiled for a GPU target on the CPU and
read from its cubin. `python -m tools.audit` (`make gpu-compile`)."""
