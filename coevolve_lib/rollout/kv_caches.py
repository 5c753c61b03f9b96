"""The `kv_cache` engine's caches (`rollout.engines.KVCacheEngine`): each episode's keys and values kept apart between
its requests, stacked into one left-padded batch for a forward pass, and split per episode again after it.

A stacked batch reserves room after its longest row for the tokens the next forward passes add (`RoomyLayer`):
transformers' `DynamicLayer` concatenates instead, which copies the whole cache at every decode step (docs/log.md
has its cost)."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class RoomyLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of larger buffers: new ones are written into the room after
    them, and the buffers double only when the room runs out."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.buffers = [keys, values]
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def update(self, key_states, value_states, *args, **kwargs):
        start, added = self.keys.shape[-2], key_states.shape[-2]
        if start + added > self.buffers[0].shape[-2]:
            self.buffers = [torch.cat([buffer, buffer.new_zeros(*buffer.shape[:2], start + added, buffer.shape[3])],
                                      dim=2) for buffer in self.buffers]
        for buffer, states in zip(self.buffers, (key_states, value_states)):
            buffer[:, :, start:start + added] = states
        self.keys, self.values = (buffer[:, :, :start + added] for buffer in self.buffers)
        return self.keys, self.values


def stack_caches(rows: list[list[tuple] | None], device, room: int = 0) -> tuple[DynamicCache, torch.Tensor]:
    """A cache holding the rows' caches (per layer (keys, values), each [heads, tokens, head_dim]; None: nothing
    cached), left-padded to the longest, with `room` positions reserved after them, and its attention mask."""
    lengths = [0 if layers is None else layers[0][0].shape[1] for layers in rows]
    width = max(lengths)
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], dtype=torch.long, device=device)
    cache = DynamicCache()
    if width == 0:
        return cache, mask
    template = next(layers for layers in rows if layers is not None)
    for layer, (keys, values) in enumerate(template):
        heads, _, dim = keys.shape
        stacked = [keys.new_zeros(len(rows), heads, width + room, dim),
                   values.new_zeros(len(rows), heads, width + room, dim)]
        for index, layers in enumerate(rows):
            if layers is not None and lengths[index]:
                stacked[0][index, :, width - lengths[index]:width] = layers[layer][0]
                stacked[1][index, :, width - lengths[index]:width] = layers[layer][1]
        cache.layers.append(RoomyLayer(*stacked, width))
    return cache, mask


def unstack_caches(cache: DynamicCache, mask: torch.Tensor) -> list[list[tuple]]:
    """Per row, per layer (keys, values) of the positions the mask keeps (padding and idle steps dropped)."""
    keep = [row.nonzero().squeeze(1) for row in mask.bool()]
    return [[(layer.keys[index].index_select(1, positions), layer.values[index].index_select(1, positions))
             for layer in cache.layers] for index, positions in enumerate(keep)]
