"""tpuprep.io."""
