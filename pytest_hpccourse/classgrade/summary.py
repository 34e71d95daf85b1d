"""The instructor's summary of a gradebook: per-lesson pass rate, score distribution and the most common failing
tests, as a terminal table and as one self-contained HTML page (inline SVG: the lessons × students heat map and
one histogram per lesson; no JavaScript, no plotting library).

NEEDS rows (a part no node could run) are left out of pass rates, means and histograms: they are no grade, not
zero. MISSING (no commit), TIMEOUT, CRASHED and ERROR rows count as the 0 they scored.
"""

from __future__ import annotations

import datetime as dt
import html
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_hpccourse.grading.report import clip, pad, width

from .gradebook import Row

FAULTS = frozenset({"TIMEOUT", "CRASHED", "ERROR"})
BINS = 11  # histogram bins: total/max rounded to tenths of the maximum, 0 … 10


@dataclass
class LessonStats:
    module: str
    lesson: str
    path: str
    title: str = ""
    graded: list[float] = field(default_factory=list)  # total/max of the rows with a grade (no NEEDS)
    passed: int = 0
    needs: int = 0
    faults: int = 0
    missing: int = 0
    failing: Counter[str] = field(default_factory=Counter)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / len(self.graded) if self.graded else None

    def histogram(self) -> list[int]:
        counts = [0] * BINS
        for fraction in self.graded:
            counts[min(BINS - 1, max(0, round(fraction * (BINS - 1))))] += 1
        return counts


def lesson_stats(rows: Iterable[Row]) -> list[LessonStats]:
    stats: dict[tuple[str, str], LessonStats] = {}
    for row in rows:
        s = stats.setdefault((row.module, row.path), LessonStats(row.module, row.lesson, row.path))
        s.title = s.title or row.title
        if row.status == "NEEDS":
            s.needs += 1
            continue
        s.graded.append(row.total / row.max_score if row.max_score else 0.0)
        s.passed += row.status == "PASS"
        s.faults += row.status in FAULTS
        s.missing += row.status == "MISSING"
        s.failing.update(row.failed_tests)
    return [stats[k] for k in sorted(stats)]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _mean(values: list[float], scale: float = 10.0) -> str:
    return f"{statistics.fmean(values) * scale:.1f}" if values else "-"


def _median(values: list[float], scale: float = 10.0) -> str:
    return f"{statistics.median(values) * scale:.1f}" if values else "-"


def terminal(rows: list[Row]) -> str:
    """The per-lesson table (scores on the /10 scale)."""
    stats = lesson_stats(rows)
    students = sorted({r.student for r in rows})
    table = [["lesson", "title", "graded", "pass", "mean", "median", "needs", "faults", "most common failing test"]]
    for s in stats:
        common = s.failing.most_common(1)
        table.append([s.lesson, clip(s.title, 20), str(len(s.graded)), _pct(s.pass_rate), _mean(s.graded),
                      _median(s.graded), str(s.needs), str(s.faults + s.missing),
                      f"{clip(common[0][0], 48)} ({common[0][1]})" if common else "-"])
    widths = [max(width(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(pad(c, widths[i]) for i, c in enumerate(r)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    passed = sum(1 for r in rows if r.status == "PASS")
    graded = sum(1 for r in rows if r.status != "NEEDS")
    lines.append(f"\n{len(students)} student(s), {len(stats)} lesson(s): {passed}/{graded} graded lessons passed"
                 + (f", {len(rows) - graded} NEEDS" if len(rows) > graded else ""))
    return "\n".join(lines)


# ---- HTML ---------------------------------------------------------------------------------
CELL = 18
STATUS_COLOURS = {"NEEDS": "#c8c8c8", "MISSING": "#ffffff", "TIMEOUT": "#5b2a86", "CRASHED": "#5b2a86",
                  "ERROR": "#5b2a86"}


def score_colour(fraction: float) -> str:
    """Red (0) through amber to green (full marks)."""
    return f"hsl({120 * max(0.0, min(1.0, fraction)):.0f}, 65%, 48%)"


def _cell_colour(row: Row) -> str:
    if row.status in STATUS_COLOURS:
        return STATUS_COLOURS[row.status]
    return score_colour(row.total / row.max_score if row.max_score else 0.0)


def heatmap(rows: list[Row]) -> str:
    """Students (rows) × lessons (columns), one cell per gradebook row, its score as colour and as a tooltip."""
    lessons = sorted({(r.module, r.path, r.lesson) for r in rows})
    students = sorted({r.student for r in rows})
    cells = {(r.student, r.module, r.path): r for r in rows}
    left, top = 10 + 7 * max((len(s) for s in students), default=4), 90
    w, h = left + CELL * len(lessons) + 10, top + CELL * len(students) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
           f'aria-label="lessons by students heat map" font-family="sans-serif" font-size="11">']
    for j, (_, _, lesson) in enumerate(lessons):
        x = left + CELL * j + CELL / 2
        out.append(f'<text x="{x:.0f}" y="{top - 6}" transform="rotate(-60 {x:.0f} {top - 6})">'
                   f'{html.escape(lesson)}</text>')
    for i, student in enumerate(students):
        y = top + CELL * i
        out.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{html.escape(student)}</text>')
        for j, (module, path, lesson) in enumerate(lessons):
            row = cells.get((student, module, path))
            if row is None:
                continue
            tip = f"{student} {lesson}: {row.status} {row.total:g}/{row.max_score:g}"
            if row.reasons:
                tip += " — " + row.reasons[0][:160]
            out.append(f'<rect x="{left + CELL * j}" y="{y}" width="{CELL - 1}" height="{CELL - 1}" '
                       f'fill="{_cell_colour(row)}" stroke="#999" stroke-width="0.3">'
                       f'<title>{html.escape(tip)}</title></rect>')
    out.append("</svg>")
    return "".join(out)


def histogram(stats: LessonStats, pass_fraction: float = 0.8) -> str:
    """Count of students per score (0 … 10) of one lesson; bars at or above the pass line are green."""
    counts = stats.histogram()
    bar, gap, height, base = 16, 3, 90, 110
    peak = max(counts) or 1
    w = BINS * (bar + gap) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{base + 18}" role="img" '
           f'aria-label="score histogram of {html.escape(stats.lesson)}" font-family="sans-serif" font-size="10">']
    for k, n in enumerate(counts):
        x = 10 + k * (bar + gap)
        hh = height * n / peak
        colour = "#2e9e4f" if k / (BINS - 1) >= pass_fraction else "#d0573d"
        out.append(f'<rect x="{x}" y="{base - hh:.1f}" width="{bar}" height="{hh:.1f}" fill="{colour}">'
                   f'<title>{k}/10: {n} student(s)</title></rect>')
        if n:
            out.append(f'<text x="{x + bar / 2}" y="{base - hh - 3:.1f}" text-anchor="middle">{n}</text>')
        out.append(f'<text x="{x + bar / 2}" y="{base + 13}" text-anchor="middle" fill="#555">{k}</text>')
    out.append(f'<line x1="8" x2="{w - 8}" y1="{base}" y2="{base}" stroke="#333"/></svg>')
    return "".join(out)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.hists { display: flex; flex-wrap: wrap; gap: 1.2em; } .hist figcaption { font-size: 0.85em; }
.legend span { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle;
               border: 1px solid #999; }
.muted { color: #777; font-size: 0.85em; } td.title { min-width: 11em; }
"""


def page(rows: list[Row], title: str = "Class summary") -> str:
    stats = lesson_stats(rows)
    students = sorted({r.student for r in rows})
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    graders = sorted({r.grader for r in rows})
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>{len(students)} students · {len(stats)} lessons · {len(rows)} gradebook rows · generated {when}"
             f"<br><span class=\"muted\">grader {html.escape(', '.join(graders))}</span></p>",
             "<h2>Lessons × students</h2><p class=\"legend\">score<span style=\"background:"
             f"{score_colour(0)}\"></span>0<span style=\"background:{score_colour(0.5)}\"></span>5"
             f"<span style=\"background:{score_colour(1)}\"></span>10"
             f"<span style=\"background:{STATUS_COLOURS['NEEDS']}\"></span>NEEDS"
             f"<span style=\"background:{STATUS_COLOURS['TIMEOUT']}\"></span>timeout / crash / error"
             f"<span style=\"background:#fff\"></span>missing</p>",
             heatmap(rows),
             "<h2>Score distribution per lesson</h2><div class=\"hists\">"]
    for s in stats:
        parts.append(f"<figure class=\"hist\">{histogram(s)}<figcaption><b>{html.escape(s.lesson)}</b> "
                     f"{html.escape(s.title)} — pass {_pct(s.pass_rate)}, n={len(s.graded)}</figcaption></figure>")
    parts.append("</div><h2>Lessons</h2><table><tr><th>lesson</th><th>title</th><th>graded</th><th>pass rate</th>"
                 "<th>mean /10</th><th>median /10</th><th>NEEDS</th><th>timeout / crash / error</th>"
                 "<th>missing</th><th>most common failing tests</th></tr>")
    for s in stats:
        common = "<br>".join(f"{html.escape(t)} ({n})" for t, n in s.failing.most_common(3)) or "-"
        parts.append(f"<tr><td>{html.escape(s.lesson)}</td><td class=title>{html.escape(s.title)}</td>"
                     f"<td class=num>{len(s.graded)}</td><td class=num>{_pct(s.pass_rate)}</td>"
                     f"<td class=num>{_mean(s.graded)}</td><td class=num>{_median(s.graded)}</td>"
                     f"<td class=num>{s.needs}</td><td class=num>{s.faults}</td><td class=num>{s.missing}</td>"
                     f"<td>{common}</td></tr>")
    parts.append("</table><h2>Students</h2><table><tr><th>student</th>"
                 + "".join(f"<th>{html.escape(s.lesson)}</th>" for s in stats)
                 + "<th>total</th><th>commit</th><th>ignored files</th></tr>")
    by_student: dict[str, dict[tuple[str, str], Row]] = {}
    for r in rows:
        by_student.setdefault(r.student, {})[(r.module, r.path)] = r
    for student in students:
        mine = by_student[student]
        cells = []
        for s in stats:
            r = mine.get((s.module, s.path))
            if r is None:
                cells.append("<td></td>")
                continue
            text = "NEEDS" if r.status == "NEEDS" else (f"{r.total:g}" if r.status not in FAULTS | {"MISSING"}
                                                        else r.status)
            tip = html.escape("; ".join(r.reasons)[:300])
            cells.append(f"<td class=num title=\"{tip}\" style=\"background:{_cell_colour(r)}33\">{text}</td>")
        total = sum(r.total for r in mine.values())
        top = sum(r.max_score for r in mine.values() if r.status != "NEEDS")
        commits = sorted({r.commit_sha[:8] for r in mine.values() if r.commit_sha})
        ignored = sorted({p for r in mine.values() for p in r.ignored})
        parts.append(f"<tr><td>{html.escape(student)}</td>{''.join(cells)}<td class=num>{total:g}/{top:g}</td>"
                     f"<td><code>{' '.join(commits) or '-'}</code></td>"
                     f"<td>{html.escape(', '.join(ignored)) or '-'}</td></tr>")
    parts.append("</table></body></html>\n")
    return "".join(parts)


def write_html(rows: list[Row], folder: Path) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "index.html"
    target.write_text(page(rows), encoding="utf-8")
    return target
