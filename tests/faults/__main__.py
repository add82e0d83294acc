"""`python -m tests.faults [--seed S] [--rounds N] [--short] [--kinds K,...]`: the fault campaign
(tests.faults.campaign). Progress goes to stderr; stdout gets one line,

    fault-test: faults=N lost=0 duplicate=0 valid_dead_lettered=0 max_recovery_s=X

and the exit code is 1 if anything was lost, duplicated or dead-lettered, or another problem showed
(listed on stderr), 2 on bad arguments."""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

from tests.faults import campaign
from tests.faults.kinds import KINDS, SHORT, Timing


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="the campaign's seed (default: a random one, printed)")
    parser.add_argument("--rounds", type=int, help="faults of each kind (default 2; --short: 1)")
    parser.add_argument("--short", action="store_true",
                        help="short faults (PostgreSQL down 5 s, a broker 5 s, the disk full 5 s)")
    parser.add_argument("--kinds", help=f"comma-separated subset of: {', '.join(KINDS)}")
    parser.add_argument("--postgres-down", type=float, metavar="SECONDS", help="how long PostgreSQL stays stopped")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between notifications (default 1)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="run under DIR and keep it (logs, ledger)")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    if unknown := [kind for kind in kinds if kind not in KINDS]:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    args.kinds = kinds
    args.rounds = args.rounds or (1 if args.short else 2)
    if args.rounds < 1 or args.interval <= 0:
        parser.error("--rounds and --interval must be positive")
    return args


def shown(seconds: list[float | None]) -> str:
    return ", ".join(f"{s:.1f}" if s is not None else "none" for s in seconds)


def main(argv: list[str]) -> int:
    args = arguments(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    timing = SHORT if args.short else Timing()
    if args.postgres_down is not None:
        timing = Timing(**{**timing.__dict__, "postgres_down_s": args.postgres_down})
    root = args.keep or Path(tempfile.mkdtemp(prefix="sluice-faults-"))
    try:
        outcome = campaign.run(root, seed, args.rounds, timing, kinds=args.kinds, interval=args.interval)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    for label, items in (("lost", outcome.lost), ("duplicate", outcome.duplicate),
                         ("valid dead-lettered", outcome.dead_letters), ("problem", outcome.problems)):
        for item in items[:20]:
            campaign.say(f"{label}: {item}")
    campaign.say(f"seed {seed} (--seed {seed} repeats the order of faults); {outcome.accepted} notifications; "
                 f"recoveries (s): {shown(outcome.recoveries)}; a fresh notification launched after (s): "
                 f"{shown(outcome.catch_ups)}, at most {outcome.max_catch_up_s:.1f}")
    print(outcome.line(), flush=True)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
