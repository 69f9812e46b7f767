"""Calibration: microbenchmarks of this machine (`microbench`, `host`, `gil`, `frees`, `steady`,
`measure`, `gpu`) fitted into an `asyncsim.Profile` (`fits`, `calibrate`). Never the workloads it
predicts.
"""
