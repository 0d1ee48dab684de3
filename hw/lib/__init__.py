"""Gateware primitives with no Hotline-specific contract, each defined once (as Amaranth's
own ``amaranth.lib``): one-hot and priority encoders and popcount (`onehot`), stream register
slices and forks (`register_slice`, `stream_fork`), queues and rings (`buffered_fifo`,
`funnel_fifo`, `banked_ring`, `output_queue`, `fifo_room`), counters (`up_down`,
`lagged_counter`) and register replicas for synthesis (`replica`). The blocks in ``hw/`` build
on them; nothing here imports a block.
"""
