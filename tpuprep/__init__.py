"""tpuprep: exact, fast preprocessing of TpuGraphs into Parquet shards."""
__version__ = "0.1.0"
