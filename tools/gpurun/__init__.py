"""The GPU run: everything the project measures on a GPU, in one command that returns the
most valuable figures first and survives being cut at any point (docs/gpu.md).

    python3 -m tools.gpurun            on a CUDA box, within --budget seconds (540)
    python3 -m tools.gpurun --smoke    the same parts on a CPU, at tiny sizes (CI rehearses it)
    python -m tools.gpurun --plan      what each part launches, its estimate and its limit
"""
