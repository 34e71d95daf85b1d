"""Authoring tools: `hpccourse check` (static rules, fork runner), audit, giveaways, attack, release,
solution regions and the lesson scaffold.

May import `grading` and `runtimes`; never `site` (docs/architecture.md).
"""
