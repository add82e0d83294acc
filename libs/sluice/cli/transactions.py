"""`sluice datasets begin | add --transaction | commit | abort`: a dataset transaction over several
commands. The server opens a transaction at a position and commits it with all its partitions at once
(CommitTransaction); between `begin` and `commit` the CLI keeps the partitions `add` gives in a file of
the transactions directory (--transactions-dir, env SLUICE_TRANSACTIONS_DIR, default
~/.cache/sluice/transactions). A transaction's ID is NAMESPACE.DATASET@POSITION, as `begin` prints it.

    tx=$(sluice datasets begin experiments.clickstream)          # experiments.clickstream@7
    sluice datasets add --transaction "$tx" --key hour=01 --location /data/.../hour=01
    sluice datasets add --transaction "$tx" --key hour=02 --location /data/.../hour=02
    sluice datasets commit "$tx"                                  # one notification, both partitions
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from google.protobuf import json_format

from sluice.cli.output import Refused, UsageError
from sluice.client import SluiceClient
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.v1 import notifications_pb2 as npb


def register(datasets) -> None:
    begin = datasets.add_parser("begin", help="open a transaction; prints its ID (NAMESPACE.DATASET@POSITION)")
    begin.add_argument("dataset", metavar="NAMESPACE.NAME")
    directory_option(begin)
    begin.set_defaults(handler=_begin)
    for action, text in (("commit", "commit the transaction with the partitions added to it (one notification)"),
                         ("abort", "abort the transaction: none of its partitions is published")):
        sub = datasets.add_parser(action, help=text)
        sub.add_argument("id", metavar="ID", help="NAMESPACE.DATASET@POSITION, as `datasets begin` printed it")
        if action == "abort":
            sub.add_argument("--reason", default="aborted from the CLI")
        directory_option(sub)
        sub.set_defaults(handler=_commit if action == "commit" else _abort)


def directory_option(parser) -> None:
    parser.add_argument("--transactions-dir", type=Path, default=None,
                        help="where open transactions keep their partitions (env SLUICE_TRANSACTIONS_DIR; "
                             "default ~/.cache/sluice/transactions)")


def parse_id(text: str) -> tuple[str, str, int]:
    dataset, at, position = text.rpartition("@")
    namespace, dot, name = dataset.partition(".")
    if not at or not dot or not namespace or not name or not position.isdigit():
        raise UsageError(f"transaction ID: expected NAMESPACE.DATASET@POSITION (as `datasets begin` prints it), "
                         f"got {text!r}")
    return namespace, name, int(position)


def _file(args, transaction: str) -> Path:
    """One file per server and transaction, so two servers' positions never mix."""
    root = args.transactions_dir or Path(os.environ.get("SLUICE_TRANSACTIONS_DIR") or
                                         Path.home() / ".cache" / "sluice" / "transactions")
    server = hashlib.sha256(args.server.encode()).hexdigest()[:16]
    return root / server / f"{transaction}.json"


def _stub(client: SluiceClient) -> datasets_pb2_grpc.PartitionsStub:
    return datasets_pb2_grpc.PartitionsStub(client.channel)


def _begin(client: SluiceClient, args) -> int:
    namespace, dot, name = args.dataset.partition(".")
    if not dot or not namespace or not name:
        raise UsageError(f"dataset: expected NAMESPACE.NAME, got {args.dataset!r}")
    response = _stub(client).BeginTransaction(pb.BeginTransactionRequest(namespace=namespace, dataset=name,
                                                                         owner="cli"), timeout=10)
    transaction = f"{namespace}.{name}@{response.position}"
    path = _file(args, transaction)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text("[]")
    print(json.dumps({"transaction": transaction, "position": response.position, "status": response.status})
          if args.json else transaction)
    return 0


def add(args, partition: npb.PartitionRef) -> int:
    """`datasets add --transaction ID`: the partition joins the transaction's file, published at commit."""
    parse_id(args.transaction)
    path = _file(args, args.transaction)
    if not path.is_file():
        raise Refused("NOT_FOUND", f"no open transaction {args.transaction} begun with this transactions directory "
                                   f"({path.parent.parent})")
    if args.dataset and args.dataset != args.transaction.rpartition("@")[0]:
        raise UsageError(f"dataset {args.dataset} is not the transaction's ({args.transaction})")
    partitions = json.loads(path.read_text())
    partitions.append(json_format.MessageToDict(partition))
    path.write_text(json.dumps(partitions))
    print(json.dumps({"transaction": args.transaction, "partitions": len(partitions)}) if args.json else
          f"added to transaction {args.transaction} ({len(partitions)} partition(s), published at commit)")
    return 0


def _commit(client: SluiceClient, args) -> int:
    namespace, name, position = parse_id(args.id)
    path = _file(args, args.id)
    partitions = [json_format.ParseDict(p, npb.PartitionRef()) for p in json.loads(path.read_text())] \
        if path.is_file() else []
    response = _stub(client).CommitTransaction(pb.CommitTransactionRequest(
        namespace=namespace, dataset=name, position=position, partitions=partitions), timeout=10)
    path.unlink(missing_ok=True)
    return _settled(args, response, f"committed transaction {args.id} ({len(partitions)} partition(s))")


def _abort(client: SluiceClient, args) -> int:
    namespace, name, position = parse_id(args.id)
    response = _stub(client).AbortTransaction(pb.AbortTransactionRequest(
        namespace=namespace, dataset=name, position=position, reason=args.reason), timeout=10)
    _file(args, args.id).unlink(missing_ok=True)
    return _settled(args, response, f"aborted transaction {args.id}")


def _settled(args, response: pb.TransactionResponse, text: str) -> int:
    print(json.dumps({"transaction": args.id, "position": response.position, "status": response.status})
          if args.json else text)
    return 0
