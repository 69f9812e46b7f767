"""The CPU device: Numba kernels for every op of `asyncsim.nd.ops` (`kernels.KERNELS`)."""
