"""Batching: merge concurrent requests into one model call (TF Serving's batching layer)."""

from servinglib.batching.batching_servable import BatchingServable as BatchingServable
from servinglib.batching.options import BatchingParameters as BatchingParameters
from servinglib.batching.options import parse_batching_parameters as parse_batching_parameters
from servinglib.batching.options import read_batching_parameters as read_batching_parameters
from servinglib.batching.scheduler import BatchObserver as BatchObserver
from servinglib.batching.scheduler import BatchQueue as BatchQueue
from servinglib.batching.scheduler import BatchRecord as BatchRecord
from servinglib.batching.scheduler import BatchTask as BatchTask
from servinglib.batching.scheduler import QueueStatistics as QueueStatistics
from servinglib.batching.scheduler import SharedBatchScheduler as SharedBatchScheduler

__all__ = [
    "BatchObserver",
    "BatchQueue",
    "BatchRecord",
    "BatchTask",
    "BatchingParameters",
    "BatchingServable",
    "QueueStatistics",
    "SharedBatchScheduler",
    "parse_batching_parameters",
    "read_batching_parameters",
]
