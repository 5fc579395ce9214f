"""Batches of sampled configs for training loops (issue #14): ``ConfigBatches`` (``batches.py``) plans an
epoch of (graph, batch) items, shards it over ranks and DataLoader workers, and reads each batch's k
configs through ``Dataset.read_configs``; ``strategies.py`` holds the pure NumPy row-choosing rules."""
