"""Solution regions: find them in lesson files and blank them for the student release.

A region is the reference solution between two marker lines; an optional HINT line (or several
consecutive ones) just before BEGIN survives the release:

    Python (.py, .pyi)                      C-like (.c .h .cc .cpp .cxx .hh .hpp .cu .cuh
                                                     .mlir .td .ptx)
    ### HINT: accumulate in float64         // HINT: one thread per element
    ### BEGIN SOLUTION                      // BEGIN SOLUTION
    ...                                     ...
    ### END SOLUTION                        // END SOLUTION

Files whose comments start with `#` but are not Python (.toml .yaml .yml .sh .cfg .cmake,
CMakeLists.txt, Makefile) use the `###` markers too (TOML has no `//` comments).

Released blanks:
- Python: the region becomes `raise NotImplementedError("TODO(<id>): <hint>")` at the BEGIN
  marker's indentation, so the function fails loudly until the learner writes it.
- every other style: the region becomes one comment `// TODO(<id>): <hint>` (or `# TODO...`) at the
  same indentation: the file still compiles and the blank computes nothing. Lesson authors keep
  declarations the rest of the file needs outside the region.

Markers must be balanced and never nested; a line that mentions BEGIN/END SOLUTION but is not an
exact marker of the file's style is an error too (a typo there would leak the solution).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath

DEFAULT_HINT = "write this part"


class Style(Enum):
    PYTHON = "python"  # ### markers, blank raises NotImplementedError
    HASH = "hash"  # ### markers, blank is a `#` comment
    SLASH = "slash"  # // markers, blank is a `//` comment


_SUFFIX_STYLE: dict[str, Style] = {
    ".py": Style.PYTHON,
    ".pyi": Style.PYTHON,
    **dict.fromkeys((".toml", ".yaml", ".yml", ".sh", ".cfg", ".cmake"), Style.HASH),
    **dict.fromkeys(
        (".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".cu", ".cuh", ".mlir", ".td", ".ptx"),
        Style.SLASH,
    ),
}
_NAME_STYLE: dict[str, Style] = {"CMakeLists.txt": Style.HASH, "Makefile": Style.HASH}

_LEADER = {Style.PYTHON: "###", Style.HASH: "###", Style.SLASH: "//"}
_TODO_LEADER = {Style.HASH: "#", Style.SLASH: "//"}
_MENTION = re.compile(r"\b(BEGIN|END)\s+SOLUTION\b", re.IGNORECASE)


def style_for(path: str | PurePath) -> Style | None:
    """The marker style of a file, by suffix (or by name); None for files without one."""
    p = PurePath(path)
    return _NAME_STYLE.get(p.name) or _SUFFIX_STYLE.get(p.suffix.lower())


class RegionError(Exception):
    """A malformed solution region: names the file and the 1-based line."""

    def __init__(self, file: str | PurePath, line: int, msg: str) -> None:
        self.file = str(file)
        self.line = line
        self.msg = msg
        super().__init__(f"{self.file}:{line}: {msg}")


@dataclass(frozen=True)
class Region:
    """One solution region. Line numbers are 1-based and inclusive of the marker lines."""

    path: str
    begin: int  # line of BEGIN SOLUTION
    end: int  # line of END SOLUTION
    indent: str  # leading whitespace of the BEGIN line
    hint: str | None  # text of the HINT line(s) just before BEGIN, joined by spaces
    hint_start: int | None  # first HINT line, when there is one


def _marker(leader: str, word: str) -> re.Pattern[str]:
    return re.compile(rf"^(?P<indent>[ \t]*){re.escape(leader)}[ \t]*{word}[ \t]+SOLUTION[ \t]*$")


def _hint_re(leader: str) -> re.Pattern[str]:
    return re.compile(rf"^[ \t]*{re.escape(leader)}[ \t]*HINT:[ \t]*(?P<text>.*?)[ \t]*$")


def find_regions(text: str, path: str | PurePath) -> list[Region]:
    """All solution regions of `text` (the content of `path`), in order.

    Raises RegionError for unbalanced, nested or malformed markers, a HINT line that does not lead
    into a BEGIN line, and markers in a file type that has no marker style.
    """
    style = style_for(path)
    lines = text.splitlines()
    if style is None:
        for no, line in enumerate(lines, 1):
            if _MENTION.search(line):
                raise RegionError(path, no, f"solution marker in a file type without a marker "
                                  f"style ({PurePath(path).name}); see pytest_hpccourse/authoring/regions.py")
        return []
    leader = _LEADER[style]
    begin_re, end_re, hint_re = _marker(leader, "BEGIN"), _marker(leader, "END"), _hint_re(leader)
    regions: list[Region] = []
    open_at: int | None = None
    open_indent = ""
    hint_lines: list[tuple[int, str]] = []  # pending HINT lines outside a region
    hint_for_open: list[tuple[int, str]] = []
    for no, line in enumerate(lines, 1):
        if m := begin_re.match(line):
            if open_at is not None:
                raise RegionError(path, no, f"nested BEGIN SOLUTION (the region opened at line "
                                  f"{open_at} is not closed)")
            open_at, open_indent = no, m["indent"]
            hint_for_open, hint_lines = hint_lines, []
            continue
        if end_re.match(line):
            if open_at is None:
                raise RegionError(path, no, "END SOLUTION without a BEGIN SOLUTION")
            hint = " ".join(t for _, t in hint_for_open if t) or None
            regions.append(Region(str(path), open_at, no, open_indent, hint,
                                  hint_for_open[0][0] if hint_for_open else None))
            open_at = None
            continue
        if _MENTION.search(line) and _is_comment_like(line):
            raise RegionError(path, no, f"malformed solution marker {line.strip()!r}; expected "
                              f"'{leader} BEGIN SOLUTION' or '{leader} END SOLUTION' on a line "
                              f"of its own")
        if open_at is not None:
            continue  # region content is never inspected further
        if hm := hint_re.match(line):
            hint_lines.append((no, hm["text"]))
            continue
        if hint_lines:
            raise RegionError(path, hint_lines[0][0], "HINT line must come directly before "
                              "BEGIN SOLUTION")
    if open_at is not None:
        raise RegionError(path, open_at, "BEGIN SOLUTION is never closed by END SOLUTION")
    if hint_lines:
        raise RegionError(path, hint_lines[0][0], "HINT line must come directly before "
                          "BEGIN SOLUTION")
    return regions


def _is_comment_like(line: str) -> bool:
    # Mentions inside code (a string literal such as "BEGIN SOLUTION") are left alone; a comment
    # line that looks like a marker but is not exact is almost always a typo.
    return line.lstrip().startswith(("#", "//", "/*", "*"))


def todo_message(lesson_id: str, hint: str | None) -> str:
    return f"TODO({lesson_id}): {hint or DEFAULT_HINT}"


def blank(text: str, path: str | PurePath, lesson_id: str) -> str:
    """`text` with every solution region replaced by its TODO; HINT lines stay.

    Line endings (LF or CRLF) and every line outside the regions are preserved byte for byte.
    """
    regions = find_regions(text, path)
    if not regions:
        return text
    style = style_for(path)
    assert style is not None  # find_regions returns [] for files without a style
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if "\r\n" in text else "\n"
    out: list[str] = []
    cursor = 0  # 0-based index of the next line to copy
    for r in regions:
        out.extend(lines[cursor : r.begin - 1])
        msg = todo_message(lesson_id, r.hint)
        if style is Style.PYTHON:
            todo = f"{r.indent}raise NotImplementedError({json.dumps(msg, ensure_ascii=False)})"
        else:
            todo = f"{r.indent}{_TODO_LEADER[style]} {msg}"
        end_line = lines[r.end - 1]
        out.append(todo + (newline if end_line.endswith(("\n", "\r")) else ""))
        cursor = r.end
    out.extend(lines[cursor:])
    return "".join(out)
