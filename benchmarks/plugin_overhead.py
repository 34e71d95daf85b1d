"""Overhead of the plugin: pytest on ~200 generated lessons, with and without pytest-hpccourse.

Usage: python benchmarks/plugin_overhead.py [--lessons 200] [--tests 5] [--repeat 5]
Prints the median wall time of each variant and the relative overhead. Not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LESSON = '''id = "bench{module:02d}-{n:02d}"
title = "基准 {n}"
requires = []
files = ["kernel.py"]
tests = ["test_kernel.py"]

[[mutants]]
file = "kernel.py"
find = "a + b"
replace = "a - b"
why = "wrong operator"

[[questions]]
id = "Q1"
kind = "numeric"
prompt = "?"
answer = 12.0
rel_tol = 0.01
explanation = "12"

[[questions]]
id = "Q2"
kind = "choice"
prompt = "?"
options = ["A. x", "B. y"]
answer = "B"
explanation = "B"

[[questions]]
id = "Q3"
kind = "formula"
prompt = "?"
variables = ["n"]
answer = "12*n"
explanation = "12n"
'''


def make_course(root: Path, lessons: int, tests: int, work: int = 0) -> None:
    (root / "scoring.toml").write_text("[points]\ncode = 4\nquestions = [2, 2, 2]\npass = 8\n")
    for n in range(lessons):
        folder = root / "modules" / f"{n // 20:02d}-m" / f"{n:03d}-lesson"
        folder.mkdir(parents=True)
        (folder / "lesson.toml").write_text(LESSON.format(module=n // 20, n=n % 20 + 1))  # unique, valid ids
        (folder / "kernel.py").write_text("def add(a, b):\n    return a + b\n")
        # `work` loops of real arithmetic per test (about 10 ms per 200_000 on this machine's cores).
        body = "".join(
            f"def test_add_{i}():\n    total = sum(range({i} * 100 + {work}))\n    assert total >= 0\n\n"
            for i in range(tests))
        (folder / "test_kernel.py").write_text(body)
        (folder / "answers.yaml").write_text('Q1: 12\nQ2: B\nQ3: "n*12"\n')


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:  # every generated test and question passes: anything else is a broken run
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", type=int, default=200)
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--work", type=int, default=0, help="loop length inside each test (0: trivial tests)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_course(root, args.lessons, args.tests, args.work)
        base = [sys.executable, "-m", "pytest", "modules", "-q", "-p", "no:cacheprovider",
                "--import-mode=importlib"]
        variants = {
            "without plugin": base + ["-p", "no:hpccourse"],
            "with plugin": base,
            # the same 1000 code tests, the 600 question items collected but deselected: the hooks' own cost
            "with plugin, question items deselected": base + ["-k", "not toml"],
            "with plugin + --course-report + --course-json": base + ["--course-report", "--course-json",
                                                                     str(root / "c.json")],
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeat):  # interleaved, so drifting machine load hits every variant alike
            for name, cmd in variants.items():
                times[name].append(timed(cmd, root))
        reference = statistics.median(times["without plugin"])
        print(f"{args.lessons} lessons x {args.tests} code tests (+3 question items each with the plugin), "
              f"median of {args.repeat} runs")
        for name, values in times.items():
            med = statistics.median(values)
            print(f"  {name:50s} {med:7.2f} s   {100 * (med - reference) / reference:+6.1f} %")
        items = args.lessons * args.tests
        print(f"  per code test without plugin: {1000 * reference / items:.2f} ms")


if __name__ == "__main__":
    main()
