"""Torch-free trainer and evaluator over tpuprep shards (docs/spec.md §5 ``train`` / ``evaluate`` / ``predict``).

Public API::

    from tpuprep.train import TrainConfig, train, Ranker, evaluate, write_submission
    ranker = train(ds, "layout:xla:random", TrainConfig(epochs=20), out="models/xla_random")
    result = evaluate(ds, [ranker], split="valid", truth="synth/truth")
    write_submission(ds, [ranker, tile_ranker], "submission.csv", split="test")

``ds`` is the reader of docs/spec.md §4 (``tpuprep.open_dataset``). Metrics live in :mod:`.metrics`, the model
in :mod:`.model` (NumPy + Numba, hand-written backward), the CLI commands in :mod:`.cli`.
"""

from .baseline import violation_ratio
from .evaluate import EvalResult, evaluate, evaluate_graph, format_table, write_outputs
from .holdout import ConfigHoldout, restrict_configs
from .losses import pairwise_loss
from .metrics import (
    collection_means,
    expand_to_original,
    kendall_tau,
    ordered_pair_accuracy,
    slowdown_at_k,
    tile_score,
    tile_score_of_listed,
)
from .model import ModelConfig
from .predict import (
    KAGGLE_TEST_ROWS,
    SubmissionError,
    kaggle_problems,
    layout_order,
    read_submission,
    tile_top_configs,
    validate_submission,
    write_submission,
)
from .ranker import BadModel, BadScores, Ranker
from .trainer import TrainConfig, TrainingDiverged, train

__all__ = [
    "KAGGLE_TEST_ROWS",
    "BadModel",
    "BadScores",
    "ConfigHoldout",
    "EvalResult",
    "ModelConfig",
    "Ranker",
    "SubmissionError",
    "TrainConfig",
    "TrainingDiverged",
    "collection_means",
    "evaluate",
    "evaluate_graph",
    "expand_to_original",
    "format_table",
    "kaggle_problems",
    "kendall_tau",
    "layout_order",
    "ordered_pair_accuracy",
    "pairwise_loss",
    "read_submission",
    "restrict_configs",
    "slowdown_at_k",
    "tile_score",
    "tile_score_of_listed",
    "tile_top_configs",
    "train",
    "validate_submission",
    "violation_ratio",
    "write_outputs",
    "write_submission",
]
