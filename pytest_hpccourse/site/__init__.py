"""The course site: build and serve the MkDocs project (`builder`), its live-reload hook (`hook`), the pages
(`sitepages`), the site data files (`sitedata`) and lesson notebooks (`notebook`).

May import `grading`, `authoring` and `runtimes`; nothing imports `site` but the CLI (docs/architecture.md).
"""
