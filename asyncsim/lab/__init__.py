"""The lab on top of both halves: the chapters' experiments (`scenarios`), prediction against
measurement (`compare`), figures and the report (`plot`, `figures`) and the command line (`cli`).
"""

from asyncsim.lab import presets as _presets

_presets.register()  # "book-gpu": the book's GPU machine in 8.4/8.5, derived from its workloads
