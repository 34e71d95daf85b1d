"""`hpccourse grade-class --dry-run`: how long a class takes on N CPU nodes and M GPU nodes, from measured times.

A task is one student's module part (CPU or GPU). Its time comes, first found wins, from:

1. the gradebook (`--gradebook`): the median measured seconds of that module's part over the tasks graded so
   far (pytest's start-up included);
2. `--times` files: a `--course-json` report (a lesson's time = the sum of its tests' durations) or the output
   of `hpccourse check --json` (a lesson's check runs the reference, the blank and every mutant and
   alternative, so one grading run is estimated as seconds / (2 + mutants + alternatives)); a task's time is
   then `--task-overhead` (pytest's start-up, default 3 s) plus its lessons' times;
3. for a GPU part none of these measured (its lessons were NEEDS on a CPU machine): `--gpu-task-seconds`.

The class is then scheduled like Ray would, longest task first onto the first free slot: every CPU of a CPU node
is a slot, a GPU node gives `--gpus-per-node` GPU slots and its other CPUs as CPU slots; one task holds one CPU
(and one GPU for a GPU part). Start-up of Ray and fetching the repositories are not in the model.
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU = "cuda-gpu"


@dataclass
class ModuleTimes:
    name: str
    cpu_lessons: dict[str, float] = field(default_factory=dict)  # lesson id -> seconds of one grading run
    gpu_lessons: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)  # part -> median task seconds (gradebook)
    gpu_tests: set[str] = field(default_factory=set)  # GPU lessons by marked tests only: on CPU without GPU nodes

    def without_gpus(self) -> ModuleTimes:
        """The module on a cluster without GPUs: lessons with GPU-marked tests run in the CPU part."""
        moved = {k: v for k, v in self.gpu_lessons.items() if k in self.gpu_tests}
        return ModuleTimes(self.name, {**self.cpu_lessons, **moved},
                           {k: v for k, v in self.gpu_lessons.items() if k not in moved},
                           {} if moved else dict(self.measured), set())

    def task_seconds(self, part: str, overhead: float, gpu_default: float) -> float | None:
        if part in self.measured:
            return self.measured[part]
        lessons = self.cpu_lessons if part == "cpu" else self.gpu_lessons
        if not lessons:
            return None
        if part == "gpu" and not any(lessons.values()):
            return gpu_default
        return overhead + sum(lessons.values())


def _module_of(path: str, default: str) -> str:
    """The module of a lesson path (`modules/02-cuda/04-x` -> 02-cuda); `default` for a path relative to its
    module (a report written from inside the module: name the file after it, `02-cuda.json`)."""
    parts = [p for p in path.split("/") if p]
    return parts[-2] if len(parts) >= 2 else default


def read_times(path: Path, modules: dict[str, ModuleTimes]) -> None:
    data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, list):  # hpccourse check --json
        for entry in data:
            runs = 2 + len(entry.get("mutants", [])) + len(entry.get("alternatives", []))
            name = _module_of(entry["path"], Path(path).stem)
            m = modules.setdefault(name, ModuleTimes(name))
            target = m.gpu_lessons if any(GPU in u for u in entry.get("unproven", [])) else m.cpu_lessons
            target[entry["id"]] = float(entry.get("seconds", 0.0)) / runs
    elif isinstance(data, dict) and "lessons" in data:  # --course-json
        for lesson in data["lessons"]:
            name = _module_of(lesson["path"], Path(path).stem)
            m = modules.setdefault(name, ModuleTimes(name))
            tests = (lesson.get("code") or {}).get("tests", [])
            seconds = sum(float(t.get("duration", 0.0)) for t in tests)
            marked = any(t.get("outcome") == "skipped" and GPU in str(t.get("message", "")) for t in tests)
            target = m.gpu_lessons if GPU in lesson.get("needs", []) or marked else m.cpu_lessons
            target[lesson["id"]] = seconds
            if marked and GPU not in lesson.get("needs", []):
                m.gpu_tests.add(lesson["id"])
    else:
        raise ValueError(f"{path}: neither `hpccourse check --json` output nor a --course-json report")


def read_gradebook(path: Path, modules: dict[str, ModuleTimes]) -> None:
    from .gradebook import Gradebook

    seconds: dict[tuple[str, str], list[float]] = defaultdict(list)
    with Gradebook(path) as book:
        for line in book.tasks():
            if line["status"] == "ok" and line["seconds"] > 0:
                seconds[(line["module"], line["part"])].append(float(line["seconds"]))
    for (module, part), values in seconds.items():
        modules.setdefault(module, ModuleTimes(module)).measured[part] = statistics.median(values)


def schedule(tasks: list[tuple[float, str]], cpu_slots: int, gpu_slots: int) -> float:
    """Wall seconds of `tasks` ((seconds, "cpu"|"gpu")), longest first onto the first free slot of its kind."""
    free = {"cpu": [0.0] * cpu_slots, "gpu": [0.0] * gpu_slots}
    for heap in free.values():
        heapq.heapify(heap)
    end = 0.0
    for seconds, part in sorted(tasks, reverse=True):
        heap = free[part]
        start = heapq.heappop(heap)
        heapq.heappush(heap, start + seconds)
        end = max(end, start + seconds)
    return end


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m {seconds % 60:02d}s"


def _tasks(modules: dict[str, ModuleTimes], students: int, overhead: float, gpu_default: float,
           gpus: bool) -> list[tuple[float, str]]:
    tasks: list[tuple[float, str]] = []
    for m in modules.values():
        m = m if gpus else m.without_gpus()
        for part in ("cpu", "gpu"):
            seconds = m.task_seconds(part, overhead, gpu_default)
            if seconds is not None:
                tasks += [(seconds, part)] * students
    return tasks


def model(modules: dict[str, ModuleTimes], students: int, cpu_nodes: list[int], gpu_nodes: int,
          cpus_per_node: int, gpus_per_node: int, overhead: float, gpu_default: float) -> str:
    lines = [f"cost model: {students} students × {len(modules)} modules "
             f"(task = one student's module part; times: measured task medians, else overhead {overhead:g} s + "
             "lesson times)",
             f"{'module':<22}{'cpu lessons':>12}{'cpu task s':>12}{'gpu lessons':>12}{'gpu task s':>12}"]
    for name in sorted(modules):
        m = modules[name]
        cells = []
        for part in ("cpu", "gpu"):
            seconds = m.task_seconds(part, overhead, gpu_default)
            count = len(m.cpu_lessons if part == "cpu" else m.gpu_lessons)
            source = "m" if part in m.measured else ("a" if part == "gpu" and seconds == gpu_default else "")
            cells += [str(count), "-" if seconds is None else f"{seconds:.1f}{source}"]
        lines.append(f"{name:<22}{cells[0]:>12}{cells[1]:>12}{cells[2]:>12}{cells[3]:>12}")
    lines.append("(m: measured in the gradebook; a: assumed, --gpu-task-seconds; a GPU part's lesson times are "
                 "their CPU-run tests, its GPU-only tests were not timed here)")
    gpu_slots = gpu_nodes * gpus_per_node
    tasks = _tasks(modules, students, overhead, gpu_default, gpus=gpu_slots > 0)
    cpu_seconds = sum(s for s, p in tasks if p == "cpu")
    gpu_seconds = sum(s for s, p in tasks if p == "gpu")
    lines.append(f"work: {len(tasks)} tasks, {cpu_seconds / 3600:.1f} CPU-hours + {gpu_seconds / 3600:.1f} GPU-hours "
                 f"(one CPU: {_clock(cpu_seconds + gpu_seconds)})")
    for n in cpu_nodes or [1]:
        cpu_slots = n * cpus_per_node + gpu_nodes * max(0, cpus_per_node - gpus_per_node)
        runnable = [(s, p) for s, p in tasks if p == "cpu" or gpu_slots]
        wall = schedule(runnable, cpu_slots, gpu_slots)
        note = "" if gpu_slots or not any(p == "gpu" for _, p in tasks) else "  (GPU parts NEEDS: no GPU node)"
        lines.append(f"{n} CPU node(s) × {cpus_per_node} CPUs + {gpu_nodes} GPU node(s) × {gpus_per_node} GPU: "
                     f"wall {_clock(wall)}{note}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    modules: dict[str, ModuleTimes] = {}
    try:
        for path in args.times:
            read_times(path, modules)
        if args.gradebook and Path(args.gradebook).is_file():
            read_gradebook(args.gradebook, modules)
    except (OSError, ValueError, KeyError) as exc:
        print(f"hpccourse grade-class --dry-run: {exc}")
        return 2
    if args.module:  # model only these modules; lessons the files did not time count as unmeasured
        wanted = {Path(m).resolve().name for m in args.module}
        modules = {k: v for k, v in modules.items() if k in wanted}
    if not modules:
        print("hpccourse grade-class --dry-run: no times (give --times FILE or a --gradebook with graded tasks)")
        return 2
    print(model(modules, args.students, args.cpu_nodes, args.gpu_nodes, args.cpus_per_node, args.gpus_per_node,
                args.task_overhead, args.gpu_task_seconds))
    return 0
