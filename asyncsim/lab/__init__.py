"""The lab on top of both halves: the chapters' experiments (`scenarios`), prediction against
measurement (`compare`), figures and the report (`plot`, `figures`) and the command line (`cli`).
"""
