"""Sluice: an event-driven scheduler for data pipelines."""
import os

# grpcio's fork handlers (on by default in its wheels) crash a child started with a preexec_fn while the
# parent's gRPC threads run: ~3% of such children died before exec (pyspark's Java gateway among them,
# grpc/grpc#43055). Sluice never uses gRPC in a forked child (every child execs), so they are off unless
# the environment says otherwise. Read when grpc is first imported: set here, before any of ours imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
