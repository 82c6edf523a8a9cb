"""Tools around the product, not imported by it: the GPU run (gpurun) and the compile audit
(audit), each run with python -m tools.<name> from the repository root (their make targets:
gpu-run, gpu-cache, gpu-compile)."""
