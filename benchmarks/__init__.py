"""tpuprep benchmarks: everything measured side by side in one run on one corpus.

``python -m benchmarks --corpus DIR/npz --work DIR`` runs, in order: the inflate-only floor, a naive
NumPy baseline, ``tpuprep build`` with 1 and 2 workers, the shard/input size ratios and the sampled
read benchmark, then prints a table and writes ``results.json``. Each measured step runs in its own
process, so wall time and peak RSS (the largest of any process it started) are its own.
"""
