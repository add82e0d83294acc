"""`sluice datasets ...` and `sluice consumer show`: the data plane from the command line.

    sluice datasets create experiments.clickstream --key marketplace --key date:DATE --key hour:INT \\
        --base-location /data/experiments/clickstream
    sluice datasets describe experiments.clickstream
    sluice datasets add experiments.clickstream --key marketplace=US --key date=2026-11-22 --key hour=9 \\
        --location /data/.../hour=9 --size-bytes 1024 --record-count 10
    sluice datasets partitions experiments.clickstream --where marketplace=US --range hour=8..12 --since 2026-11-22T00:00Z
    tx=$(sluice datasets begin experiments.clickstream)     # a transaction over several commands:
    sluice datasets add --transaction "$tx" --key ... --location ...     # (repeat)
    sluice datasets commit "$tx"                            # or: sluice datasets abort "$tx"
    sluice datasets commits --unfinished            # commit sequences; quarantined ones with their error
    sluice consumer show experiments.clickstream hourly      # the consumer's state as JSON
    sluice consumer show --state-file state.bin              # a state kept by a worker, offline
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from sluice.cli import render, transactions
from sluice.cli.output import UsageError, jsonable, pairs, print_json, print_many, print_message
from sluice.client import SluiceClient
from sluice.domain.consumer.serialization import ConsumerStateError, state_from_bytes, state_to_json
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.v1 import notifications_pb2 as npb
from sluice.wire.common import timestamp_to_proto

KEY_TYPES = {"STRING": pb.KEY_TYPE_STRING, "INT": pb.KEY_TYPE_INT, "DATE": pb.KEY_TYPE_DATE}

def register(commands) -> None:
    datasets = commands.add_parser("datasets", help="partitioned datasets and their partitions").add_subparsers(
        metavar="ACTION")
    create = datasets.add_parser("create", help="define a partitioned dataset")
    create.add_argument("dataset", metavar="NAMESPACE.NAME")
    create.add_argument("--key", action="append", default=[], metavar="NAME[:TYPE]",
                        help="partition key in order, TYPE one of STRING (default), INT, DATE (repeat)")
    create.add_argument("--base-location", required=True, help="where the partitions' files live")
    create.add_argument("--description", default="")
    create.set_defaults(handler=_create)
    describe = datasets.add_parser("describe", help="a dataset's definition")
    describe.add_argument("dataset", metavar="NAMESPACE.NAME")
    describe.set_defaults(handler=lambda c, a: print_message(a, _stub(c).GetDataset(pb.GetDatasetRequest(**_name(a)))))
    listing = datasets.add_parser("list", help="datasets")
    listing.add_argument("--namespace", default="")
    listing.set_defaults(handler=_list)
    add = datasets.add_parser("add", help="add one partition in its own transaction (announced at once), or to an "
                                          "open one (--transaction: announced at its commit)")
    add.add_argument("dataset", metavar="NAMESPACE.NAME", nargs="?", help="(optional with --transaction)")
    add.add_argument("--transaction", metavar="ID", help="a transaction `datasets begin` opened")
    transactions.directory_option(add)
    add.add_argument("--key", action="append", default=[], metavar="K=V", help="partition key value (repeat)")
    add.add_argument("--location", required=True)
    add.add_argument("--size-bytes", type=int, default=0)
    add.add_argument("--record-count", type=int, default=0)
    add.add_argument("--metadata", action="append", default=[], metavar="K=V")
    add.set_defaults(handler=_add)
    partitions = datasets.add_parser("partitions", help="query a dataset's partitions by key ranges and time")
    partitions.add_argument("dataset", metavar="NAMESPACE.NAME")
    partitions.add_argument("--where", action="append", default=[], metavar="K=V1|V2", help="allowed values (repeat)")
    partitions.add_argument("--range", action="append", default=[], metavar="K=LOW..HIGH",
                            help="LOW <= value < HIGH by the key's type; either side may be empty (repeat)")
    partitions.add_argument("--metadata", action="append", default=[], metavar="K=V", help="metadata value (repeat)")
    partitions.add_argument("--since", help="committed at or after (ISO 8601 with zone)")
    partitions.add_argument("--until", help="committed before (ISO 8601 with zone)")
    partitions.add_argument("--after", default="", metavar="ID", help="resume after this partition id")
    partitions.add_argument("--limit", type=int, default=100)
    partitions.set_defaults(handler=_partitions)
    sequences = datasets.add_parser("commits", help="commit sequences (exactly-once publishing) and quarantine")
    sequences.add_argument("--unfinished", action="store_true", help="only PENDING and QUARANTINED ones")
    sequences.set_defaults(handler=_commits)
    release = datasets.add_parser("release", help="retry a quarantined commit sequence after fixing its cause")
    release.add_argument("id")
    release.set_defaults(handler=lambda c, a: print_message(a, _stub(c).ReleaseCommitSequence(
        pb.ReleaseCommitSequenceRequest(id=a.id))))
    transactions.register(datasets)

    consumer = commands.add_parser("consumer", help="partition consumers").add_subparsers(metavar="ACTION")
    show = consumer.add_parser("show", help="a consumer's state as JSON (high-water mark, in flight, working set)")
    show.add_argument("dataset", nargs="?", metavar="NAMESPACE.NAME")
    show.add_argument("consumer", nargs="?")
    show.add_argument("--state-file", type=Path, help="decode a state kept as bytes instead (no server needed)")
    show.set_defaults(handler=_show_consumer)


def _stub(client: SluiceClient) -> datasets_pb2_grpc.PartitionsStub:
    return datasets_pb2_grpc.PartitionsStub(client.channel)


def _name(args) -> dict[str, str]:
    namespace, dot, name = args.dataset.partition(".")
    if not dot or not namespace or not name:
        raise UsageError(f"dataset: expected NAMESPACE.NAME, got {args.dataset!r}")
    return {"namespace": namespace, "name": name}


def _create(client: SluiceClient, args) -> int:
    if not args.key:
        raise UsageError("--key: a dataset needs at least one partition key")
    keys = []
    for text in args.key:
        name, _, kind = text.partition(":")
        kind = (kind or "STRING").upper()
        if kind not in KEY_TYPES:
            raise UsageError(f"--key {text}: type must be one of {', '.join(KEY_TYPES)}")
        keys.append(pb.PartitionKey(name=name, type=KEY_TYPES[kind]))
    base = args.base_location  # a path is the caller's: relative to where they stand, not the server
    dataset = pb.Dataset(**_name(args), partition_keys=keys,
                         base_location=base if "://" in base else os.path.abspath(base),
                         description=args.description)
    return print_message(args, _stub(client).CreateDataset(pb.CreateDatasetRequest(dataset=dataset), timeout=10))


def _list(client: SluiceClient, args) -> int:
    found = _stub(client).ListDatasets(pb.ListDatasetsRequest(namespace=args.namespace), timeout=10).datasets
    rows = [(f"{d.namespace}.{d.name}", ", ".join(f"{k.name}:{pb.KeyType.Name(k.type)[9:]}" for k in d.partition_keys),
             d.next_position, d.base_location) for d in found]
    return print_many(args, found, render.table(("DATASET", "PARTITION KEYS", "TRANSACTIONS", "BASE LOCATION"), rows))


def _add(client: SluiceClient, args) -> int:
    partition = npb.PartitionRef(key=[npb.KeyValue(name=k, value=v) for k, v in pairs(args.key, "--key").items()],
                                 location=args.location, size_bytes=args.size_bytes, record_count=args.record_count,
                                 metadata=pairs(args.metadata, "--metadata"))
    if args.transaction:
        return transactions.add(args, partition)
    if not args.dataset:
        raise UsageError("datasets add: give NAMESPACE.NAME, or --transaction ID")
    name = _name(args)
    response = _stub(client).AddPartitions(pb.AddPartitionsRequest(
        namespace=name["namespace"], dataset=name["name"], partitions=[partition], owner="cli"), timeout=10)
    print(json.dumps({"position": response.position}) if args.json else
          f"committed transaction {response.position} of {args.dataset}")
    return 0


def _partitions(client: SluiceClient, args) -> int:
    name = _name(args)
    keys = [pb.KeyCondition(name=k, one_of=v.split("|")) for k, v in pairs(args.where, "--where").items()]
    for text in args.range:
        key, equals, bounds = text.partition("=")
        low, dots, high = bounds.partition("..")
        if not equals or not dots or not key:
            raise UsageError(f"--range: expected K=LOW..HIGH, got {text!r}")
        keys.append(pb.KeyCondition(name=key, lower=low or None, upper=high or None))
    metadata = [pb.MetadataCondition(name=k, one_of=[v]) for k, v in pairs(args.metadata, "--metadata").items()]
    request = pb.ListPartitionsRequest(namespace=name["namespace"], dataset=name["name"], after=args.after,
                                       where=pb.PartitionFilter(keys=keys, metadata=metadata), limit=args.limit,
                                       committed_after=_time(args.since, "--since"),
                                       committed_before=_time(args.until, "--until"))
    response = _stub(client).ListPartitions(request, timeout=30)
    if args.json:
        print_json(jsonable(response))
        return 0
    rows = [(p.id, render.key_text(p.partition.key), p.partition.record_count, p.partition.size_bytes,
             render.when(p.committed_at), p.partition.location) for p in response.partitions]
    print(render.table(("ID", "KEY", "RECORDS", "BYTES", "COMMITTED", "LOCATION"), rows))
    if response.next_after:
        print(f"(more: --after {response.next_after})")
    return 0


def _commits(client: SluiceClient, args) -> int:
    found = _stub(client).ListCommitSequences(pb.ListCommitSequencesRequest(unfinished_only=args.unfinished),
                                              timeout=10).sequences
    rows = [(s.id[:8], s.run_id[:8], s.status, f"{s.steps_done}/{s.steps}", ", ".join(s.datasets), s.failures,
             (s.error or "-")[:60]) for s in found]
    return print_many(args, found, render.table(("SEQUENCE", "RUN", "STATUS", "STEPS", "DATASETS", "FAILURES",
                                                  "ERROR"), rows))


def _show_consumer(client: SluiceClient, args) -> int:
    if args.state_file is not None:
        try:
            document = state_to_json(state_from_bytes(args.state_file.read_bytes()))
        except OSError as error:
            raise UsageError(f"--state-file: cannot read {args.state_file}: {error.strerror or error}") from None
        except ConsumerStateError as error:
            raise UsageError(f"--state-file: {error}") from None
        print(json.dumps(document, indent=2))
        return 0
    if not args.dataset or not args.consumer:
        raise UsageError("consumer show: give NAMESPACE.NAME CONSUMER, or --state-file PATH")
    name = _name(args)
    response = _stub(client).GetConsumer(pb.GetConsumerRequest(namespace=name["namespace"], dataset=name["name"],
                                                               consumer=args.consumer), timeout=10)
    print(response.json)
    return 0


def _time(text: str | None, option: str):
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option}: not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise UsageError(f"{option}: give a zone, e.g. {text}Z or {text}+01:00")
    return timestamp_to_proto(when)
