"""Program-side SDK: what a PySpark program launched by Sluice uses.

`sluice.sdk.context` is pure stdlib (the launcher uses it too); the Spark half is imported
lazily, on first use of one of its names, so `import sluice.sdk` never pulls in pyspark.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .context import (
    CONTEXT_FLAG,
    ApiAccess,
    ContextError,
    Lineage,
    Notification,
    PartitionRef,
    ProgramContext,
    ProgramRef,
    ScheduleRef,
    SystemPaths,
    context_from_argv,
    load_context,
    parse_context,
)

from .partitions import Between, ConsumedPartition, ConsumeError, PartitionSource, filter_from_mapping

if TYPE_CHECKING:
    from .spark import SdkError, SparkProgram, StagedFile, StagedOutput, error_line, run

_SPARK_NAMES = {"SdkError", "SparkProgram", "StagedFile", "StagedOutput", "error_line", "run"}

__all__ = [
    "CONTEXT_FLAG", "ApiAccess", "ContextError", "Lineage", "Notification", "PartitionRef", "ProgramContext",
    "ProgramRef", "ScheduleRef", "SystemPaths", "context_from_argv", "load_context", "parse_context",
    "Between", "ConsumedPartition", "ConsumeError", "PartitionSource", "filter_from_mapping",
    *sorted(_SPARK_NAMES),
]


def __getattr__(name: str) -> Any:
    if name in _SPARK_NAMES:
        from . import spark
        return getattr(spark, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
