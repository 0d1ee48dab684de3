"""Benchmarks: ``python -m hotline.bench [--out bench/results.json] [--only SECTION ...]
[--quick]`` (`hotline.bench.benchmarks`), each figure next to a same-run reference; and
`hotline.bench.hash_quality`, the hash-table fill measurements behind the CAM geometry."""
