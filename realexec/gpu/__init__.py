"""The GPU devices: numba.cuda kernels (`kernels`, `matmul`, `memory`), a device's streams, events
and pool (`device`), stream-ordered vars (`vars`) and the backend mix-in that issues ops to them
(`backend`). Importing this package does not import numba.cuda; `kernels` does.
"""
