"""Transforms for tests: what a user's ``transform = "module:function"`` step may do wrong."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def noisy_amount(df: DataFrame) -> DataFrame:
    """Add ``rand()`` to ``amount``: each replica computes different sums (non-deterministic).

    The spec's own expressions may not call ``rand()`` (validation rejects it); a transform
    is opaque to validation, so arfl's divergence check is what catches this one.
    """
    from pyspark.sql import functions as F

    return df.withColumn("amount", F.col("amount") + F.rand())
