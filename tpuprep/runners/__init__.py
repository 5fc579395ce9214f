"""tpuprep.runners."""
