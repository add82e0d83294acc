"""What a launched PySpark program uses: read the triggering partitions, stage outputs, write result.json.

    from sluice.sdk import run

    def main(program):
        events = program.read_partitions("clickstream")
        for part in program.context.partitions("clickstream"):
            program.write_output(summarise(events, part.key), "experiments", "summary", dict(part.key))
        return {"my_metric": 1}          # optional, merged into result.json "metrics"

    if __name__ == "__main__":
        run(main)

Outputs are written under system.staging_dir; the launcher moves them to their final location
after the program exits 0, using the manifest in result.json. A failed program writes no result.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sluice.domain.consumer.state import ConsumerConfig
from sluice.domain.datasets.filters import PartitionFilter
from sluice.domain.names import encode_segment

from .context import ProgramContext, context_from_argv
from .lineage import SparkApplicationLineage, events_path
from .spark_application import write_spark_application
from .partitions import ConsumedPartition, DatasetPartition, PartitionSource

# Applied only when spark-submit did not set them: small runs should not pay for 200 shuffle tasks.
DEFAULT_SPARK_CONF = {"spark.sql.shuffle.partitions": "4"}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DROPPED_FILES = re.compile(r"^(\..*\.crc|_SUCCESS)$")   # Hadoop checksums and the success marker


class SdkError(RuntimeError):
    """The program used the SDK in a way that cannot produce a valid result."""


@dataclass(frozen=True)
class StagedFile:
    path: str              # relative to the output's staged_location
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class StagedOutput:
    namespace: str
    dataset: str
    key: Mapping[str, str]
    staged_location: str
    format: str
    size_bytes: int
    record_count: int
    files: tuple[StagedFile, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "dataset": self.dataset, "key": dict(self.key),
            "staged_location": self.staged_location, "format": self.format,
            "size_bytes": self.size_bytes, "record_count": self.record_count,
            "files": [{"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256} for f in self.files],
        }


class SparkProgram:
    """One run of a program: its context, its SparkSession, the inputs it read and the outputs it staged."""

    def __init__(self, context: ProgramContext, spark: SparkSession | None = None,
                 defaults: Mapping[str, str] | None = None) -> None:
        self.context = context
        self.metrics: dict[str, Any] = {}
        self._spark = spark
        self._owns_spark = spark is None
        self._defaults = dict(DEFAULT_SPARK_CONF if defaults is None else defaults)
        self._inputs: dict[tuple, dict[str, Any]] = {}
        self._outputs: dict[tuple, StagedOutput] = {}
        self._source = PartitionSource(context)
        self._consumed: dict[tuple[str, str], list[ConsumedPartition]] = {}
        self.finished = False
        self._lineage: SparkApplicationLineage | None = None

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None, **kwargs: Any) -> SparkProgram:
        return cls(context_from_argv(argv), **kwargs)

    @property
    def spark(self) -> SparkSession:
        """The SparkSession, created on first use with appName = the lineage job name."""
        if self._spark is None:
            spark = SparkSession.builder.appName(self.context.app_name).getOrCreate()
            submitted = spark.sparkContext.getConf()
            for name, value in self._defaults.items():
                if not submitted.contains(name):
                    spark.conf.set(name, value)
            self._spark = spark
            _report_application(self.context.system.result_path, spark)
            if self.context.lineage is not None:   # the Spark application: a child run of the program's run
                self._lineage = SparkApplicationLineage(self.context.lineage, events_path(self.context.system.result_path))
                self._lineage.started(spark.version, spark.sparkContext.applicationId)
        return self._spark

    @property
    def outputs(self) -> tuple[StagedOutput, ...]:
        return tuple(self._outputs.values())

    def read_partitions(self, dataset: str, format: str = "json", *, namespace: str | None = None,
                        schema: StructType | None = None, options: Mapping[str, str] | None = None) -> DataFrame:
        """A DataFrame over exactly the triggering partitions of `dataset`, with each partition's
        key columns added as string literals (replacing data columns of the same name)."""
        parts = self.context.partitions(dataset, namespace)
        if not parts:
            name = f"{namespace}.{dataset}" if namespace else dataset
            raise SdkError(f"no triggering partitions of dataset {name} in this run's notifications")
        opts = dict(options or {})
        if schema is None:   # infer once over all partitions so that they union cleanly
            schema = self.spark.read.format(format).options(**opts).load([_uri(p.location) for p in parts]).schema
        frames = []
        for p in parts:
            df = self.spark.read.format(format).options(**opts).schema(schema).load(_uri(p.location))
            frames.append(df.withColumns({k: F.lit(v) for k, v in p.key.items()}))
            self._inputs[(p.namespace, p.dataset, _key_id(p.key))] = {
                "namespace": p.namespace, "dataset": p.dataset, "key": dict(p.key), "location": p.location}
        return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)

    def consume(self, dataset: str, limit: int = 1000, where: Mapping[str, Any] | PartitionFilter | None = None, *,
                metadata: Mapping[str, Any] | None = None, namespace: str | None = None,
                consumer: str | None = None, config: ConsumerConfig | None = None, format: str = "json",
                schema: StructType | None = None, options: Mapping[str, str] | None = None) -> DataFrame:
        """A DataFrame over exactly the partitions of `dataset` this run takes now from its partition
        consumer (new ones, and failed ones being retried): at most `limit`, those matching `where`
        (key values, `Between(lower, upper)` ranges, lists of values) and `metadata`. Key columns are
        added as string literals. The partitions are completed when the run's outputs are published,
        and marked failed (retried later) if the run fails. With none to take, the DataFrame is empty
        (with `schema`, or just the key columns)."""
        taken = self._source.take(dataset, limit, where, metadata=metadata, namespace=namespace,
                                  consumer=consumer, config=config)
        namespace = namespace or self.context.program.namespace
        self._consumed.setdefault((namespace, dataset), []).extend(taken)
        for p in taken:
            self._inputs[(p.namespace, p.dataset, _key_id(p.key))] = {
                "namespace": p.namespace, "dataset": p.dataset, "key": dict(p.key), "location": p.location}
        return self._frame(taken, format, schema, options)

    def has_dataset(self, dataset: str, namespace: str | None = None) -> bool:
        """Whether `dataset` is registered with Sluice (then `consume`, `partitions` and `read` serve it)."""
        return self._source.knows(dataset, namespace)

    def partitions(self, dataset: str, where: Mapping[str, Any] | PartitionFilter | None = None, *,
                   metadata: Mapping[str, Any] | None = None,
                   namespace: str | None = None) -> tuple[DatasetPartition, ...]:
        """The dataset's committed partitions matching `where` (latest per key): a query, nothing is consumed."""
        return tuple(self._source.partitions(dataset, where, metadata=metadata, namespace=namespace))

    def read(self, dataset: str, where: Mapping[str, Any] | PartitionFilter | None = None, *,
             namespace: str | None = None, format: str = "json", schema: StructType | None = None,
             options: Mapping[str, str] | None = None) -> DataFrame:
        """A DataFrame over the dataset's partitions matching `where` (latest per key), key columns added."""
        return self._frame(self.partitions(dataset, where, namespace=namespace), format, schema, options)

    def _frame(self, parts, format: str, schema: StructType | None, options: Mapping[str, str] | None) -> DataFrame:
        if not parts:
            fields = list(schema.fields) if schema is not None else []
            return self.spark.createDataFrame([], StructType(fields))
        opts = dict(options or {})
        if schema is None:
            schema = self.spark.read.format(format).options(**opts).load([_uri(p.location) for p in parts]).schema
        frames = [self.spark.read.format(format).options(**opts).schema(schema).load(_uri(p.location))
                  .withColumns({k: F.lit(v) for k, v in p.key.items()}) for p in parts]
        return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)

    def consumed(self, dataset: str, namespace: str | None = None) -> tuple[ConsumedPartition, ...]:
        """The partitions of `dataset` this run has taken so far (by all its consume calls)."""
        return tuple(self._consumed.get((namespace or self.context.program.namespace, dataset), ()))

    def write_output(self, df: DataFrame, namespace: str, dataset: str, key: Mapping[str, str],
                     format: str = "parquet", options: Mapping[str, str] | None = None) -> StagedOutput:
        """Write `df` as one file under staging_dir/<dataset>/<k=v>/... and record its manifest."""
        if self.finished:
            raise SdkError("write_output after finish()")
        for what, value in (("namespace", namespace), ("dataset", dataset)):
            if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
                raise SdkError(f"output {what} must be a non-empty name without '/', got {value!r}")
        key = _check_key(key)
        ident = (namespace, dataset, _key_id(key))
        if ident in self._outputs:
            raise SdkError(f"output {namespace}.{dataset} {key} written twice in one run")
        staged = Path(self.context.system.staging_dir, dataset, *(f"{_seg(k)}={_seg(v)}" for k, v in key.items()))
        opts = dict(options or {})
        df.coalesce(1).write.mode("overwrite").format(format).options(**opts).save(_uri(str(staged)))
        files = _manifest(staged)
        count = self.spark.read.format(format).options(**opts).schema(df.schema).load(_uri(str(staged))).count()
        out = StagedOutput(namespace=namespace, dataset=dataset, key=key, staged_location=str(staged),
                           format=format, size_bytes=sum(f.size_bytes for f in files),
                           record_count=count, files=files)
        self._outputs[ident] = out
        return out

    def finish(self, metrics: Mapping[str, Any] | None = None) -> Path:
        """Write result.json atomically (temp file + rename). Call once, after the last output."""
        if self.finished:
            raise SdkError("finish() called twice")
        if metrics is not None and not isinstance(metrics, Mapping):
            raise SdkError(f"metrics must be a mapping of names to JSON values, got {type(metrics).__name__}")
        outputs = self.outputs
        result = {
            "outputs": [o.to_json() for o in outputs],
            "inputs": list(self._inputs.values()),
            "consumed": self._source.consumed_document(),
            "metrics": {**self.metrics, **(metrics or {}), "rows_written": sum(o.record_count for o in outputs)},
        }
        path = Path(self.context.system.result_path)
        _atomic_write_json(path, result)
        self.finished = True
        return path

    def stop(self) -> None:
        """Stop the SparkSession if this object created it."""
        self._source.close()
        if self._lineage is not None:
            self._lineage.finished(self.finished, ((i["namespace"], i["dataset"]) for i in self._inputs.values()),
                                   ((o.namespace, o.dataset) for o in self._outputs.values()))
        if self._spark is not None and self._owns_spark:
            self._spark.stop()
        self._spark = None

    def __enter__(self) -> SparkProgram:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None and not self.finished:
                self.finish()
        finally:
            self.stop()


def run(main: Callable[[SparkProgram], Mapping[str, Any] | None], argv: Sequence[str] | None = None,
        **kwargs: Any) -> NoReturn:
    """Run `main(program)`, write result.json on success and exit 0; on failure write no result,
    print the traceback and then one readable error line to stderr, and exit non-zero."""
    program: SparkProgram | None = None
    failure: str | None = None
    code = 0
    try:
        program = SparkProgram.from_argv(argv, **kwargs)
        metrics = main(program)
        if not program.finished:
            program.finish(metrics)
    except (Exception, KeyboardInterrupt) as e:
        traceback.print_exc()
        failure, code = error_line(e), 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        if program is not None:
            try:
                program.stop()
            except Exception:  # a failing stop must not hide the real outcome
                pass
    if failure is not None:
        who = program.context.program.qualified_name if program else "program"
        print(f"sluice: {who} failed: {failure}", file=sys.stderr, flush=True)
    sys.exit(code)


def error_line(exc: BaseException, limit: int = 400) -> str:
    """One readable line for an exception (py4j errors carry the JVM message on a later line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("An error occurred while calling")] or [""]
    message = lines[0].lstrip(": ").strip()
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_key(key: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(key, Mapping) or not key:
        raise SdkError(f"output key must be a non-empty mapping, got {key!r}")
    for k, v in key.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or not v:
            raise SdkError(f"output key names and values must be non-empty strings, got {k!r}: {v!r}")
    return dict(key)


def _key_id(key: Mapping[str, str]) -> tuple:
    return tuple(sorted(key.items()))


def _seg(text: str) -> str:
    """A key name or value made safe as a path segment: the one encoding of sluice.domain.names (Hive's)."""
    return encode_segment(text)


def _uri(location: str) -> str:
    """Plain paths are local files (an explicit scheme keeps Hadoop off any default filesystem)."""
    return location if _SCHEME.match(location) else "file://" + os.path.abspath(location)


def _manifest(staged: Path) -> tuple[StagedFile, ...]:
    """Drop Hadoop's side files, then list every remaining file with its size and sha256."""
    files = []
    for path in sorted(p for p in staged.rglob("*") if p.is_file()):
        if _DROPPED_FILES.match(path.name):
            path.unlink()
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        files.append(StagedFile(path.relative_to(staged).as_posix(), path.stat().st_size, digest.hexdigest()))
    return tuple(files)


def _atomic_write_json(path: Path, document: Any) -> None:
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _report_application(result_path: str, spark: SparkSession) -> None:
    """The launcher records the application on the run; a program that cannot say carries on."""
    try:
        write_spark_application(result_path, spark.sparkContext.applicationId, spark.sparkContext.uiWebUrl)
    except OSError as error:
        print(f"sluice: the Spark application id was not reported: {error!r}", file=sys.stderr)
