"""`sluice auth`: who the server takes you for (whoami), and a token's hash for the policy file (hash-token)."""
from __future__ import annotations

import argparse
import sys

from sluice.cli.output import print_message
from sluice.runtime.auth_policy import hash_token
from sluice.v1 import access_pb2, access_pb2_grpc


def register(commands: argparse._SubParsersAction) -> None:
    auth = commands.add_parser("auth", help="authorization: who you are, token hashes").add_subparsers(metavar="ACTION")
    whoami = auth.add_parser("whoami", help="the principal the server takes this client's credentials for, "
                                            "and its roles per namespace")
    whoami.set_defaults(handler=_whoami)
    hashing = auth.add_parser("hash-token", help="print the SHA-256 (hex) of the token read from stdin, for "
                                                 "token_sha256 in the policy file")
    hashing.set_defaults(handler=_hash_token, server_mode=True)


def _whoami(client, args) -> int:
    answer = access_pb2_grpc.AccessStub(client.channel).WhoAmI(access_pb2.WhoAmIRequest(), timeout=10)
    if args.json:
        return print_message(args, answer)
    print(f"principal: {answer.principal}")
    if not answer.authorization:
        print("authorization: off (the server checks no credentials: every call is allowed)")
        return 0
    print("grants:" if answer.grants else "grants: none")
    for grant in answer.grants:
        datasets = f" datasets {','.join(grant.datasets)}" if grant.datasets else ""
        print(f"  {grant.role} on {grant.namespace}{datasets}")
    return 0


def _hash_token(args: argparse.Namespace) -> int:
    token = sys.stdin.readline().rstrip("\r\n")
    if not token:
        print("sluice: error: no token on stdin (e.g. sluice auth hash-token < token-file)", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0
