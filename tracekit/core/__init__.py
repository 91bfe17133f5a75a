"""What every stage stands on and none of them owns: atomic file writes, Arrow/numpy columns,
grouped array operations and their keys, file names as users read them, and the compiled-kernel
machinery (`kernels`, built ahead of time by `aot_build`).

Nothing here imports a stage.
"""
