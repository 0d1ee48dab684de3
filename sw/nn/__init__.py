"""hotline.nn: an embedding-bag collection whose storage is placed (docs/nn.md)."""
