"""tpuprep.shards."""
