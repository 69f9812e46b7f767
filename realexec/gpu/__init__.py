"""The GPU devices: numba.cuda kernels (`kernels`, `matmul`), pooled memory (`memory`), numba.cuda
itself with device discovery, contexts, copies and events (`runtime`), a device's streams, events
and pool (`device`), stream-ordered vars (`vars`) and the backend mix-in that issues ops to them
(`backend`). Importing this package does not import numba.cuda; `runtime` (so `kernels`) does.
"""
