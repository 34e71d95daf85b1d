"""The `hpccourse` command: list lessons, release a module, check soundness, scaffold a lesson, grade a class."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_hpccourse import __version__
from pytest_hpccourse.grading import manifest
from pytest_hpccourse.grading.report import clip, pad, width

SUBCOMMANDS = {
    "release": ("pytest_hpccourse.authoring.release", "write a module's student repo (solutions blanked)"),
    "check": ("pytest_hpccourse.authoring.check", "prove lessons sound: reference 10/10, blank 0, mutants caught"),
    "attack": ("pytest_hpccourse.authoring.attack", "grade wrong and correct learner-style variants; report misgrades"),
    "new": ("pytest_hpccourse.authoring.scaffold", "scaffold a new lesson folder"),
    "grade-class": ("pytest_hpccourse.classgrade.command",
                    "grade a class's forks on Ray into a resumable SQLite gradebook (instructors)"),
    "site": ("pytest_hpccourse.site.builder", "build or serve the course site (learner or reference edition)"),
    "notebook": ("pytest_hpccourse.site.notebook", "write one lesson as a Jupyter notebook"),
}


def list_lessons(paths: Sequence[str]) -> int:
    dirs = list(manifest.iter_lesson_dirs(Path(p) for p in (paths or ["."])))
    rows = [["id", "title", "requires", "questions", "path"]]
    invalid = 0
    for folder in dirs:
        try:
            lesson = manifest.load_lesson(folder)
        except manifest.ManifestError as exc:
            invalid += 1
            rows.append([manifest.read_id(folder) or "?", "INVALID", "", str(exc).splitlines()[0], ""])
            continue
        rows.append([lesson.id, clip(lesson.title, 28), ",".join(lesson.requires) or "-",
                     " ".join(q.kind for q in lesson.questions), manifest.display_path(folder)])
    widths = [max(width(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(pad(c, widths[i]) if i < 4 else c for i, c in enumerate(row)).rstrip())
    print(f"\n{len(dirs)} lesson(s)" + (f", {invalid} INVALID" if invalid else ""))
    return 1 if invalid else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="hpccourse", description="Tools for the pytest-hpccourse course.")
    parser.add_argument("--version", action="version", version=f"hpccourse {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_list = sub.add_parser("list", help="list the lessons found with id, title, requires, question kinds")
    p_list.add_argument("paths", nargs="*", help="folders to search (default: .)")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
        return int(module.main(argv[1:]))
    args = parser.parse_args(argv)
    if args.command == "list":
        return list_lessons(args.paths)
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
