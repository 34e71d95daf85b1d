"""The instructor's side: grade a whole class of forks on Ray (`hpccourse grade-class`, docs/grade-class.md).

`roster` (who, and where their repo is), `fetch` (clone, pick the commit: pinned, last before the deadline, or
the tip), `overlay` (the pristine module plus only the files a learner edits), `tasks` (one Ray task per student,
module and CPU/GPU part: a pytest run in its own temp dir and process, with a timeout and a memory limit),
`gradebook` (SQLite: one row per student and lesson, resume and exactly-once writes), `progress` (the live bar or
plain lines), `summary` (terminal table and the HTML page), `costmodel` (`--dry-run`: the wall time of a class on
N CPU + M GPU nodes) and `command` (the CLI and the driver loop).
"""
