"""Write a benchmark's table into the README between its two marker comments (the rest is left as it is)."""

from __future__ import annotations

import os
import time


def write_table(path: str, name: str, script: str, table: list[str], heading: str) -> None:
    """Replace what lies between `<!-- NAME table: SCRIPT --readme README.md -->` and `<!-- end of NAME table -->`.

    heading: what the run was ("One run, <date>, 2 cores"), written above the table with today's date.
    """
    begin, end = f"<!-- {name} table: {script} --readme README.md -->", f"<!-- end of {name} table -->"
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has no {name} markers ({begin} ... {end})")
    body = "\n".join([f"One run, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores{heading}:", "", *table])
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{body}\n{end}{tail}")
    print(f"wrote the {name} table into {path}")
