#!/usr/bin/env python3
"""A stand-in for spark-submit: the same command line, no JVM.

    fake_spark_submit.py --master URL [--conf k=v]... [other spark options] ENTRY_POINT [program args...]

It checks the options spark-submit would need, then runs ENTRY_POINT as `__main__` in this process
with the program's arguments (`--sluice-context PATH`), so a launch costs one Python start instead
of a Spark driver. Tests point servers at it with `--spark-submit` (SparkConfig.spark_submit)."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

VALUED_OPTIONS = {"--master", "--conf", "--name", "--deploy-mode", "--py-files", "--jars", "--packages",
                  "--driver-memory", "--executor-memory", "--properties-file"}


def split_command_line(argv: list[str]) -> tuple[str, dict[str, str], Path, list[str]]:
    """(master, conf, entry point, program args), or SystemExit(2) naming what is wrong."""
    master, conf, index = "", {}, 0
    while index < len(argv) and argv[index].startswith("--"):
        option = argv[index]
        if option not in VALUED_OPTIONS or index + 1 >= len(argv):
            raise SystemExit(f"fake-spark-submit: error: {option}: unknown option or missing value")
        value = argv[index + 1]
        if option == "--master":
            master = value
        elif option == "--conf":
            name, equals, setting = value.partition("=")
            if not equals:
                raise SystemExit(f"fake-spark-submit: error: --conf {value!r}: expected KEY=VALUE")
            conf[name] = setting
        index += 2
    if not master:
        raise SystemExit("fake-spark-submit: error: --master: required")
    if index >= len(argv):
        raise SystemExit("fake-spark-submit: error: no entry point (a .py file) given")
    entry_point = Path(argv[index])
    if entry_point.suffix != ".py" or not entry_point.is_file():
        raise SystemExit(f"fake-spark-submit: error: entry point {entry_point}: not a Python file")
    return master, conf, entry_point, argv[index + 1:]


def main() -> None:
    _, _, entry_point, program_args = split_command_line(sys.argv[1:])
    sys.argv = [str(entry_point), *program_args]
    sys.path.insert(0, str(entry_point.parent))
    runpy.run_path(str(entry_point), run_name="__main__")


if __name__ == "__main__":
    main()
