"""Gluon's data helpers: `split_and_load` a batch across contexts."""

from __future__ import annotations


def split_data(data, num_slice: int, batch_axis: int = 0, even_split: bool = True) -> list:
    """`data` cut into `num_slice` equal parts along its first axis."""
    if batch_axis != 0:
        raise ValueError("split_data: only batch_axis=0 is supported")
    n = data.shape[0]
    if even_split and n % num_slice:
        raise ValueError(f"data with shape {data.shape} cannot be evenly split into {num_slice} "
                         f"slices along axis 0. Use a batch size that's multiple of {num_slice} "
                         f"or set even_split=False.")
    step = n // num_slice
    bounds = [i * step for i in range(num_slice)] + [n]
    return [data[bounds[i]:bounds[i + 1]] for i in range(num_slice)]


def split_and_load(data, ctx_list, batch_axis: int = 0, even_split: bool = True) -> list:
    """One slice of `data` on each context of `ctx_list`."""
    if len(ctx_list) == 1:
        return [data.as_in_context(ctx_list[0])]
    parts = split_data(data, len(ctx_list), batch_axis, even_split)
    return [part.as_in_context(ctx) for part, ctx in zip(parts, ctx_list, strict=True)]


__all__ = ["split_and_load", "split_data"]
