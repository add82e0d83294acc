"""`python -m tests.fuzz --examples N --seed S [--only REGEX] [--keep DIR]`: the fuzz suite against a
real `sluice standalone`; the last line is `fuzz: inputs=N refused=N accepted=N crashes=N crash_loops=N`
and the exit code is 1 when there was any crash or crash loop (or an after-run check failed)."""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

from tests.fuzz.runner import Fuzz


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--examples", type=int, default=40, help="inputs per method, route and topic (default 40)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random, printed)")
    parser.add_argument("--only", default="", help="only targets whose label matches this regex")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the server's data and stderr here (default: a temporary dir, kept on failure)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"fuzz: seed {seed} (--seed {seed} repeats it), {args.examples} examples per target", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="sluice-fuzz-"))
    root.mkdir(parents=True, exist_ok=True)
    code = Fuzz(root, args.examples, seed, log=lambda line: print(line, flush=True)).run(args.only)
    if code == 0 and args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
