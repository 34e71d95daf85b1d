"""Grading: lesson manifests, collection, answers and formula grading, the rubric, results, the course report
(terminal, concise, JSON, GitHub Classroom), capabilities, crash isolation, integrity and the `lesson` fixture.

Imports `runtimes` (capability probes) only; never `authoring` or `site` (docs/architecture.md).
"""
