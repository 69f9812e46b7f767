"""The `nd` vocabulary both halves share: the op table (`ops`), the `nd` surface workloads are
written against (`frontend`) and its array handle (`ndarray`), the Program IR (`program`),
recording without data (`record`), autograd, and the Trace both halves produce (`trace`). Nothing
here imports the model or the lab.
"""
