"""The course site's pages, generated as Markdown from the lesson folders and `site/*.toml`.

Two editions: `learner` shows each lesson's released blank and its questions without keys;
`reference` adds the reference code and each answer with its explanation, collapsed. Every key and
every reference line is emitted by `_reference_code` and `answer_block` alone, and only for the
reference edition (a test searches the learner build for both).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_hpccourse.authoring import regions, release
from pytest_hpccourse.grading import manifest, rubric
from pytest_hpccourse.grading.manifest import Lesson, Question

from . import sitedata

EDITIONS = ("learner", "reference")
REFERENCE_CODE_TITLE = "参考实现（先独立完成再展开核对）"
REFERENCE_ANSWER_TITLE = "参考答案（先独立作答再展开核对）"
KIND_NAMES = {"choice": "单选", "multi": "多选", "numeric": "数值", "formula": "公式", "keywords": "简答"}
LANGUAGES = {".cu": "cuda", ".cuh": "cuda", ".py": "python", ".cpp": "cpp", ".cc": "cpp", ".h": "cpp",
             ".hpp": "cpp", ".c": "c", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".sh": "bash",
             ".mlir": "text", ".td": "text", ".ptx": "text", ".json": "json"}


@dataclass(frozen=True)
class CodeFile:
    name: str
    language: str
    reference: str
    blank: str


@dataclass(frozen=True)
class LessonSource:
    lesson: Lesson
    module_dir: str
    slug: str
    readme: str
    code: tuple[CodeFile, ...]

    @property
    def page(self) -> str:
        return f"modules/{self.module_dir}/{self.slug}.md"

    @property
    def notebook(self) -> str:
        return f"modules/{self.module_dir}/{self.slug}.ipynb"


@dataclass(frozen=True)
class ModuleSource:
    plan: sitedata.ModulePlan
    built: bool
    readme: str
    lessons: tuple[LessonSource, ...]

    @property
    def page(self) -> str:
        return f"modules/{self.plan.dir}/index.md"

    @property
    def label(self) -> str:
        return f"{self.plan.number:02d} {self.plan.title}"


@dataclass(frozen=True)
class Course:
    root: Path
    plan: sitedata.Plan
    modules: tuple[ModuleSource, ...]
    rubric: rubric.Rubric
    cheatsheet: sitedata.Cheatsheet
    system_design: sitedata.SystemDesign

    def lessons(self) -> Iterator[LessonSource]:
        for module in self.modules:
            yield from module.lessons

    def lesson(self, lesson_id: str) -> LessonSource | None:
        return next((s for s in self.lessons() if s.lesson.id == lesson_id), None)


# ---- reading the tree ---------------------------------------------------------------------------
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def read_lesson(folder: Path, module_dir: str) -> LessonSource:
    lesson = manifest.load_lesson(folder)
    code = []
    for name in lesson.files:
        text = (folder / name).read_text(encoding="utf-8")
        code.append(CodeFile(name, LANGUAGES.get(Path(name).suffix, "text"), text,
                             regions.blank(text, name, lesson.id)))
    return LessonSource(lesson, module_dir, folder.name, _read(folder / "README.md"), tuple(code))


def read_course(root: Path) -> Course:
    """The whole course as the site shows it: the plan, what is built under modules/, the data files."""
    site = root / "site"
    plan = sitedata.load_plan(site / sitedata.PLAN)
    modules = []
    for mp in plan.modules:
        folder = root / "modules" / mp.dir
        built = folder.is_dir()
        lessons = tuple(read_lesson(d, mp.dir) for d in manifest.iter_lesson_dirs([folder])) if built else ()
        modules.append(ModuleSource(mp, built, _read(folder / "README.md"), lessons))
    return Course(root, plan, tuple(modules), rubric.load(root / "modules"),
                  sitedata.load_cheatsheet(site / sitedata.CHEATSHEET),
                  sitedata.load_system_design(site / sitedata.SYSTEM_DESIGN))


# ---- Markdown helpers ---------------------------------------------------------------------------
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def text_md(text: str) -> str:
    """Author text (prompts, options, explanations) as Markdown: `<`, `>`, `&` and `_` escaped outside
    code spans (so `Swizzle<B,M,S>` and `__syncthreads` read as written); `*emphasis*` still works."""
    def plain(chunk: str) -> str:  # `__init__` is a name, not bold
        return html.escape(chunk, quote=False).replace("_", "\\_")

    out, last = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(plain(text[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(plain(text[last:]))
    return "".join(out)


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def fence(code: str, language: str, title: str = "") -> str:
    ticks = "```"
    while ticks in code:
        ticks += "`"
    head = f'{ticks}{language}' + (f' title="{title}"' if title else "")
    return f"{head}\n{code.rstrip()}\n{ticks}"


def relative(from_page: str, to_page: str) -> str:
    """A link from one docs page to another (both docs-relative paths), as MkDocs resolves it."""
    return Path(os.path.relpath(to_page, Path(from_page).parent or ".")).as_posix()


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def rewrite_links(text: str, repo_dir: str, page: str, targets: dict[str, str]) -> str:
    """Links of a file that lives in `repo_dir` (repo-relative), re-pointed for `page`: a target the
    site has a page for (`targets`: repo path → docs path) links to that page; any other relative
    target becomes its path in code (the site does not hold it), and an external address is shown,
    not linked (the site references no external host)."""

    def fix(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"^[a-z]+://", target):  # the site references no external host: show the address
            return f"{label}（`{target}`）" if label and label != target else f"`{target}`"
        if re.match(r"^([a-z]+:|#|/)", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        parts: list[str] = []
        for part in Path(repo_dir, path).as_posix().split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        repo_path = "/".join(parts)
        if repo_path in targets:
            return f"{bang}[{label}]({relative(page, targets[repo_path])}{'#' + anchor if anchor else ''})"
        return f"{label}（`{repo_path}`）" if label and label != repo_path else f"`{repo_path}`"

    out, in_fence = [], False
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            in_fence = not in_fence
        out.append(line if in_fence else _LINK.sub(fix, line))
    return "\n".join(out)


# Repo files the site shows as pages of their own (repo path → docs path).
DOC_PAGES = {"docs/hardware.md": "hardware.md"}


def link_targets(course: Course) -> dict[str, str]:
    targets = {**{k: v for k, v in DOC_PAGES.items() if (course.root / k).is_file()},
               **{f"benchmarks/{p.name}": f"benchmarks/{p.name}"
                  for p in sorted((course.root / "benchmarks").glob("*.md"))}}
    for module in course.modules:
        targets[f"modules/{module.plan.dir}"] = module.page
        targets[f"modules/{module.plan.dir}/README.md"] = module.page
        for src in module.lessons:
            targets[f"modules/{src.module_dir}/{src.slug}"] = src.page
            targets[f"modules/{src.module_dir}/{src.slug}/README.md"] = src.page
    return targets


# ---- lesson pages -------------------------------------------------------------------------------
def key_text(q: Question) -> str:
    """The key of one question as the reference edition shows it."""
    if q.kind in ("choice", "multi"):
        letters = q.answer if isinstance(q.answer, list) else [p.strip() for p in str(q.answer).split(",")]
        return "、".join(letters)
    if q.kind == "numeric":
        tol = f"相对误差 ≤ {q.rel_tol:g}" if q.rel_tol else (f"绝对误差 ≤ {q.abs_tol:g}" if q.abs_tol else "")
        return f"{q.answer:g}{(' ' + q.unit) if q.unit else ''}" + (f"（{tol}）" if tol else "")
    if q.kind == "formula":
        return f"`{q.answer}`"
    return "；".join(" / ".join(group) for group in q.groups)


def answer_block(q: Question) -> str:
    body = f"**答案：** {key_text(q)}\n\n{text_md(q.explanation.strip())}"
    return f'??? success "{REFERENCE_ANSWER_TITLE}"\n{indent(body)}'


def question_md(q: Question, points: float, edition: str) -> str:
    kind = KIND_NAMES.get(q.kind, q.kind)
    parts = [f"### {q.id}（{kind}，{points:g} 分） {{#{q.id.lower()}}}", "", text_md(q.prompt.strip())]
    if q.options:
        parts += ["", *[f"- {text_md(o.strip())}" for o in q.options]]
    if q.kind == "formula":
        parts += ["", f"变量：{'、'.join(f'`{v}`' for v in q.variables)}（在 `answers.yaml` 里写成算式）"]
    if q.kind == "numeric" and q.unit:
        parts += ["", f"单位：{q.unit}"]
    if edition == "reference":
        parts += ["", answer_block(q)]
    return "\n".join(parts)


def _reference_code(f: CodeFile) -> str:
    return f'??? note "{REFERENCE_CODE_TITLE}"\n{indent(fence(f.reference, f.language, f.name))}'


def lesson_page(src: LessonSource, course: Course, edition: str) -> str:
    lesson = src.lesson
    readme = src.readme.strip() or f"# {lesson.id} {lesson.title}"
    readme = rewrite_links(readme, f"modules/{src.module_dir}/{src.slug}", src.page, link_targets(course))
    caps = "、".join(f"`{c}`" for c in lesson.requires) or "无"
    info = (f'!!! info "怎么做这一课"\n'
            f"    在你 fork 的模块仓库里打开 `{src.slug}/`：补全下面代码里的 `TODO({lesson.id})`，"
            f"在 `answers.yaml` 里回答三道题，然后运行 `pytest {src.slug} --course-report`。"
            f"需要的运行环境：{caps}。也可以[下载 Notebook]({src.slug}.ipynb)，放进这个文件夹里做。")
    parts = [readme, "", info, "", "## 代码任务", ""]
    for f in src.code:
        parts += [f"### `{f.name}`", "", fence(f.blank, f.language, f.name), ""]
        if edition == "reference":
            parts += [_reference_code(f), ""]
    parts += ["## 题目", "", "在 `answers.yaml` 里作答（格式见课程 README 的 `answers.yaml` 一节）。", ""]
    points = course.rubric.questions
    for i, q in enumerate(lesson.questions):
        parts += [question_md(q, points[i] if i < len(points) else 0, edition), ""]
    return "\n".join(parts).rstrip() + "\n"


# ---- module pages -------------------------------------------------------------------------------
def module_page(module: ModuleSource, course: Course) -> str:
    mp = module.plan
    built = {s.lesson.id: s for s in module.lessons}
    prereq = "、".join(course.modules[n - 1].label for n in mp.prerequisites) or "无"
    lines = [f"# {module.label}", "",
             f"阶段 {mp.phase} · 已建 {len(module.lessons)} / 计划 {len(mp.lessons)} 课 · 先修：{prereq}", "",
             f"核心技能：{mp.skills}", ""]
    if module.built:
        body = module.readme.strip()
        body = re.sub(r"\A# .*\n", "", body)  # the page has its own title
        body = rewrite_links(body, f"modules/{mp.dir}", module.page, link_targets(course))
        lines += [body, ""]
    else:
        lines += ['!!! note "规划中"', "    这个模块的课程还在编写，下面是计划的课程列表。", ""]
    lines += ["## 课程列表", "", "| id | 标题 | 状态 |", "|---|---|---|"]
    for planned in mp.lessons:
        src = built.get(planned.id)
        if src:
            lines.append(f"| [{planned.id}]({src.slug}.md) | {src.lesson.title} | 已上线 |")
        else:
            lines.append(f"| {planned.id} | {planned.title} | 规划中 |")
    extra = [s for s in module.lessons if s.lesson.id not in {p.id for p in mp.lessons}]
    for src in extra:
        lines.append(f"| [{src.lesson.id}]({src.slug}.md) | {src.lesson.title} | 已上线 |")
    return "\n".join(lines) + "\n"


# ---- home ---------------------------------------------------------------------------------------
def learning_path(course: Course) -> str:
    """The learning path as a Mermaid flowchart: one subgraph per phase, one node per module."""
    lines = ["flowchart TB"]
    by_phase: dict[int, list[ModuleSource]] = {}
    for m in course.modules:
        by_phase.setdefault(m.plan.phase, []).append(m)
    for phase in course.plan.phases:
        lines.append(f'  subgraph P{phase.number}["阶段 {phase.number} · {phase.title}"]')
        lines.append("    direction LR")
        members = by_phase.get(phase.number, [])
        for m in members:
            n = len(m.plan.lessons)
            done = len(m.lessons)
            status = f"{n} 课" if done == n else f"{n} 课 · 已建 {done}"
            lines.append(f'    M{m.plan.number:02d}["{m.plan.number:02d} {m.plan.short}<br/>{status}"]')
        sequential = phase.number != 4  # phase 4's two modules run side by side
        if sequential:
            for a, b in zip(members, members[1:]):
                lines.append(f"    M{a.plan.number:02d} --> M{b.plan.number:02d}")
        lines.append("  end")
    for a, b in zip(course.plan.phases, course.plan.phases[1:]):
        lines.append(f"  P{a.number} --> P{b.number}")
    # Subgraph-level edges where possible: a node linked out of its subgraph loses the subgraph's direction.
    lines.append('  P1 -.->|"Train 1–5（01）可与 RL 并行"| M10')
    lines.append('  P3 -.->|"阶段 3 之后随时可入"| P5')
    for m in course.modules:
        lines.append(f'  click M{m.plan.number:02d} "modules/{m.plan.dir}/" "{m.label}"')
    return "\n".join(lines)


def home_page(course: Course) -> str:
    r = course.rubric
    q = " + ".join(f"Q{i + 1} {p:g}" for i, p in enumerate(r.questions))
    built = sum(len(m.lessons) for m in course.modules)
    planned = sum(len(m.plan.lessons) for m in course.modules)
    lines = [
        "# HPC / AI Infra 工程师课程", "",
        "一门给 HPC 与 AI 基础设施工程师的自动评分课程：CUDA 与 Triton kernel、CuTe layout 代数、MLIR pass、"
        "PyTorch 运行时、推理引擎（vLLM、SGLang）、集群平台、五维并行训练、RL 后训练与性能诊断。"
        f"共 {len(course.modules)} 个模块、{planned} 课，目前已上线 {built} 课。每一课是一段讲解、"
        "一个代码填空任务和三道面试深度的题目，由 pytest 插件 `pytest-hpccourse` 自动评分——在没有 GPU 的笔记本上"
        "（CUDA 模拟器、Triton 解释器）和 GPU 机器上给出同样的分数。", "",
        "## 评分规则", "",
        f"每课满分 {r.total:g} 分：代码 {r.code:g} 分 + {q} 分；**{r.pass_score:g} 分及格**。"
        "代码分由测试给出（与独立参考实现比较、随机输入、奇数形状、边界情况）；题目按 `answers.yaml` 评分"
        "（数值、公式、选择、简答）。本机无法运行的部分记为 NEEDS，既不算通过也不算 0 分。", "",
        "## 怎么学", "",
        "1. Fork（或在 GitHub Classroom 接受）一个模块仓库，例如 `03-triton`；",
        "2. 安装：先 `pip install torch==2.13.0`（或你的 CUDA 版本），再在仓库里 `pip install -e .`；",
        "3. 每课读 `README.md`，补全代码里的 `TODO(<lesson id>)`，在 `answers.yaml` 里答题；",
        "4. 运行 `pytest --course-report`（整个模块）或 `pytest 04-warp-shuffle --course-report`（一课），"
        "看每课得分和失分原因。每课页面也提供 Notebook 下载。", "",
        "## 学习路径", "",
        "五个阶段按顺序推进；虚线是可以提前或并行的路线。点击模块进入。", "",
        "```mermaid", learning_path(course), "```", "",
        "## 模块一览", "",
        "| 顺序 | 模块 | 阶段 | 已建 / 计划 | 核心技能 | 先修 |", "|---|---|---|---|---|---|",
    ]
    for m in course.modules:
        prereq = "、".join(f"{n:02d}" for n in m.plan.prerequisites) or "—"
        lines.append(f"| {m.plan.number} | [{m.label}]({m.page}) | {m.plan.phase} | "
                     f"{len(m.lessons)} / {len(m.plan.lessons)} | {m.plan.skills} | {prereq} |")
    lines += ["", "另见：[面试核心公式速查](cheatsheet.md) · [系统设计专题](system-design.md)"]
    return "\n".join(lines) + "\n"


# ---- cheatsheet and system design ---------------------------------------------------------------
def _ref_link(course: Course, lesson_id: str, qid: str, from_page: str) -> str:
    src = course.lesson(lesson_id)
    if src is None:
        raise sitedata.SiteDataError(f"site/{sitedata.CHEATSHEET}: {lesson_id}/{qid} names no built lesson")
    if qid not in {q.id for q in src.lesson.questions}:
        raise sitedata.SiteDataError(f"site/{sitedata.CHEATSHEET}: {lesson_id} has no {qid}")
    return f"[{lesson_id} {qid}]({relative(from_page, src.page)}#{qid.lower()})"


def cheatsheet_page(course: Course) -> str:
    cs = course.cheatsheet
    page = "cheatsheet.md"
    lines = ["# 面试核心公式速查", "",
             "每个公式给出变量含义、一个 H200 级硬件上的代入算例（数值由公式计算得出，见 `site/cheatsheet.toml`）、"
             "出处，以及考它的课程题目。硬件数字来自课程的 `docs/hardware.md`。", ""]
    for section in cs.sections:
        lines += [f"## {section.title}", ""]
        if section.intro.strip():
            lines += [section.intro.strip(), ""]
        for f in (f for f in cs.formulas if f.section == section.id):
            lines += [f"### {f.title} {{#{f.id}}}", "", "$$", f.latex.strip(), "$$", ""]
            lines += ["| 变量 | 含义 |", "|---|---|"]
            lines += [f"| ${v.latex}$ | {v.meaning} |" for v in f.variables]
            lines += ["", f.explain.strip(), ""]
            values = "，".join(f"${v.latex}$ = {sitedata.format_number(f.example.values[v.name])}"
                              for v in f.variables)
            lines += [f"**算例**（{f.setting}）：{values} ⇒ **{sitedata.format_number(f.example.value)}"
                      f"{(' ' + f.example.show_unit) if f.example.show_unit else ''}**", ""]
            graded = "、".join(_ref_link(course, lid, qid, page) for lid, qid in f.graded_by) or "尚无评分题目"
            lines += [f"考查：{graded} · 出处：{f.source}", ""]
    missing = [f for f in cs.formulas if not f.graded_by]
    lines += ["## 尚无评分题目的公式", ""]
    if missing:
        lines += ["以下公式还没有课程题目评分（随对应模块上线补齐）：", ""]
        lines += [f"- [{f.title}](#{f.id})" for f in missing]
    else:
        lines += ["每个公式都有课程题目评分。"]
    return "\n".join(lines) + "\n"


def system_design_page(course: Course) -> str:
    sd = course.system_design
    lines = ["# 系统设计专题", "", sd.intro.strip(), "", "## 四步法", ""]
    for i, (title, body) in enumerate(sd.steps, 1):
        lines += [f"### 第 {i} 步：{title}", "", body.strip(), ""]
    for case in sd.cases:
        lines += [f"## {case.title} {{#{case.id}}}", "", case.summary.strip(), ""]
        src = course.lesson(case.lesson) if case.lesson else None
        if src is not None:
            lines += [f"**评分练习：** [{src.lesson.id} {src.lesson.title}]({src.page})——把本案例的容量估算写成函数，"
                      "测试既核对下面这组需求，也核对改过的需求。", ""]
        elif case.lesson:
            lines += [f"**评分练习：** {case.lesson}（尚未上线）。", ""]
        lines += ["### 需求", "", case.requirements.strip(), "",
                  "### 容量估算", "", "| 量 | 计算 | 数值 | 说明 |", "|---|---|---|---|"]
        for row in case.capacity:
            how = "假设" if row.is_input else f"`{row.expr}`"
            unit = f" {row.show_unit}" if row.show_unit else ""
            lines.append(f"| {row.label} (`{row.name}`) | {how} | **{sitedata.format_number(row.value)}{unit}** | "
                         f"{row.note.replace('|', '/')} |")
        lines += ["", "### 架构", "", case.architecture.strip(), "", "```mermaid", case.diagram.strip(), "```", "",
                  "### 故障模式", "", case.failure_modes.strip(), "", "### 权衡", "", case.trade_offs.strip(), ""]
    return "\n".join(lines) + "\n"


# ---- all pages ----------------------------------------------------------------------------------
def pages(course: Course, edition: str) -> dict[str, str]:
    """Every generated page: docs-relative path → Markdown."""
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, not {edition!r}")
    out = {"index.md": home_page(course), "cheatsheet.md": cheatsheet_page(course),
           "system-design.md": system_design_page(course)}
    targets = link_targets(course)
    for repo_path, docs_path in targets.items():
        if repo_path.endswith(".md") and not repo_path.startswith("modules/"):
            text = (course.root / repo_path).read_text(encoding="utf-8")
            out[docs_path] = rewrite_links(text, str(Path(repo_path).parent), docs_path, targets)
    for module in course.modules:
        out[module.page] = module_page(module, course)
        for src in module.lessons:
            out[src.page] = lesson_page(src, course, edition)
    return out


def nav(course: Course) -> list:
    """The MkDocs `nav`: home, one section per module (its lessons, built ones only), the two topics."""
    items: list = [{"首页": "index.md"}]
    modules = []
    for m in course.modules:
        children: list = [{"概览": m.page}]
        children += [{f"{s.lesson.id} {s.lesson.title}": s.page} for s in m.lessons]
        modules.append({m.label: children})
    items.append({"模块": modules})
    items += [{"公式速查": "cheatsheet.md"}, {"系统设计": "system-design.md"}]
    refs: list = [{"硬件常数": p} for k, p in DOC_PAGES.items() if (course.root / k).is_file()]
    refs += [{p.stem: f"benchmarks/{p.name}"} for p in sorted((course.root / "benchmarks").glob("*.md"))]
    if refs:
        items.append({"参考数据": refs})
    return items


def find_root(start: Path) -> Path:
    root = release.find_course_root(start)
    if root is None or not (root / "site" / sitedata.PLAN).is_file():
        raise sitedata.SiteDataError(f"{start}: no course root (a folder with scoring.toml and site/plan.toml) "
                                     "at or above it")
    return root
