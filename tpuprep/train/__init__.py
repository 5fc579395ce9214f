"""Torch-free trainer and evaluator that consume tpuprep shards."""
