"""bench: timing, memory and benchmark drivers; the only package that imports posenc and kernels."""
