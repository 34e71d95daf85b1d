"""Reading a CUDA C source without a CUDA compiler.

What the runtimes need to know about a `.cu` file, found with a small lexer rather than a C++
parser: its `__global__` functions (name, template parameters, parameter types), features the
CPU emulator rejects (with their line), and the two rewrites the emulator needs, both of which
keep every line where it was so diagnostics name the learner's file:line:

- `__shared__ T name[dims];`  ->  a reference into the emulator's shared-memory arena, so the
  checked builds know each shared variable's extent (see include/hpccourse_cuda.h);
- `kernel<<<grid, block, smem, stream>>>(args)`  ->  `kernel * hpc::Cfg(grid, block, ...)(args)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_IDENT = re.compile(r"[A-Za-z_]\w*")


def mask_source(text: str, *, strings: bool = True, preprocessor: bool = False) -> str:
    """`text` with comments (and string/char literal contents, and optionally preprocessor lines)
    replaced by spaces. Same length, same newlines, so offsets and line numbers carry over."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if preprocessor and line_start and c == "#" or (preprocessor and line_start and c in " \t" and _pp_line(text, i)):
            # blank the directive through its continuation lines
            j = i
            while j < n:
                if text[j] == "\n" and (j == 0 or text[j - 1] != "\\"):
                    break
                if text[j] != "\n":
                    out[j] = " "
                j += 1
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c not in " \t":
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i + m.end())
                end = n if end < 0 else end + len(m.group(1)) + 2
                if strings:
                    for k in range(i + 2, end - 1):
                        if text[k] != "\n":
                            out[k] = " "
                i = end
                continue
        if c in "\"'":
            # a ' between digits is a C++14 digit separator
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                prev = text[i - 1]
                if prev.isdigit() or re.match(r"[0-9a-fA-F]", prev):
                    # crude check: inside a number literal
                    k = i - 1
                    while k >= 0 and (text[k].isalnum() or text[k] in "'."):
                        k -= 1
                    if text[k + 1].isdigit():
                        i += 1
                        continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if strings:
                for k in range(i + 1, min(j, n)):
                    out[k] = " "
            i = j + 1
            continue
        i += 1
    return "".join(out)


def _pp_line(text: str, i: int) -> bool:
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    return j < len(text) and text[j] == "#"


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _match_close(code: str, start: int, open_c: str, close_c: str) -> int:
    """Index of the bracket closing the one at `start` (or -1)."""
    depth = 0
    for k in range(start, len(code)):
        ch = code[k]
        if ch == open_c:
            depth += 1
        elif ch == close_c:
            depth -= 1
            if depth == 0:
                return k
    return -1


def _match_angle(code: str, start: int) -> int:
    """Index of the `>` closing the template `<` at `start`, skipping nested (), [], <>."""
    depth = 0
    k = start
    while k < len(code):
        ch = code[k]
        if ch in "([{":
            close = {"(": ")", "[": "]", "{": "}"}[ch]
            k = _match_close(code, k, ch, close)
            if k < 0:
                return -1
        elif ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return k
        elif ch == ";":
            return -1
        k += 1
    return -1


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside (), [], {}, <>."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip() or len(parts) > 1]


# ----------------------------------------------------------------------------- types

_SCALARS = {
    "float": ("f", 4), "double": ("f", 8), "half": ("h", 2), "__half": ("h", 2),
    "__nv_bfloat16": ("B", 2), "nv_bfloat16": ("B", 2), "bool": ("b", 1),
    "char": ("i", 1), "signed char": ("i", 1), "unsigned char": ("u", 1), "int8_t": ("i", 1), "uint8_t": ("u", 1),
    "short": ("i", 2), "short int": ("i", 2), "signed short": ("i", 2), "unsigned short": ("u", 2),
    "unsigned short int": ("u", 2), "int16_t": ("i", 2), "uint16_t": ("u", 2),
    "int": ("i", 4), "signed": ("i", 4), "signed int": ("i", 4), "unsigned": ("u", 4), "unsigned int": ("u", 4),
    "int32_t": ("i", 4), "uint32_t": ("u", 4), "uint": ("u", 4),
    "long": ("i", 8), "long int": ("i", 8), "signed long": ("i", 8), "unsigned long": ("u", 8),
    "unsigned long int": ("u", 8), "long long": ("i", 8), "long long int": ("i", 8), "signed long long": ("i", 8),
    "unsigned long long": ("u", 8), "unsigned long long int": ("u", 8), "int64_t": ("i", 8), "uint64_t": ("u", 8),
    "size_t": ("u", 8), "ssize_t": ("i", 8), "ptrdiff_t": ("i", 8), "intptr_t": ("i", 8), "uintptr_t": ("u", 8),
}
_VECTORS = {  # name -> (element kind, element size, total size)
    **{f"{b}{n}": (k, s, s * (n if n != 3 else 3)) for b, (k, s) in {
        "float": ("f", 4), "double": ("f", 8), "int": ("i", 4), "uint": ("u", 4), "char": ("i", 1), "uchar": ("u", 1),
        "short": ("i", 2), "ushort": ("u", 2), "longlong": ("i", 8), "ulonglong": ("u", 8), "long": ("i", 8),
        "ulong": ("u", 8)}.items() for n in (1, 2, 3, 4)},
    "half2": ("h", 2, 4), "__half2": ("h", 2, 4), "__nv_bfloat162": ("B", 2, 4), "nv_bfloat162": ("B", 2, 4),
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "struct", "class",
               "enum", "typename", "register"}
_TYPE_WORDS = {"unsigned", "signed", "long", "short", "int", "char", "float", "double", "bool", "void"}


@dataclass
class Param:
    text: str             # as written (with template parameters substituted)
    name: str
    is_ptr: bool
    is_const: bool        # pointer to const
    base: str             # the scalar / pointee type without qualifiers
    kind: str             # f i u b h B o(ther)  (scalar kind, or pointee kind for pointers)
    size: int             # scalar size (8 for pointers); 0 when unknown
    elem_size: int        # pointee size for pointers; 0 when unknown


def normalise_type(words: list[str]) -> str:
    return " ".join(w for w in words if w not in _QUALIFIERS)


def parse_param(text: str, subst: dict[str, str] | None = None) -> Param:
    t = text.strip()
    t = re.sub(r"\[\[.*?\]\]", " ", t)
    t = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", t)
    if "=" in t:  # default argument
        t = t[: t.index("=")].strip()
    if subst:
        t = _IDENT.sub(lambda m: subst.get(m.group(0), m.group(0)), t)
    is_arr = False
    m = re.search(r"\[\s*[^\]]*\]\s*$", t)
    if m:
        is_arr = True
        t = t[: m.start()].strip()
    tokens = re.findall(r"[A-Za-z_][\w:]*|\*|&|<[^>]*>", t)
    name = ""
    if len(tokens) >= 2 and _IDENT.fullmatch(tokens[-1]) and tokens[-1] not in _QUALIFIERS | _TYPE_WORDS:
        name = tokens[-1]
        tokens = tokens[:-1]
    stars = tokens.count("*") + (1 if is_arr else 0)
    is_ptr = stars > 0
    first_star = tokens.index("*") if "*" in tokens else len(tokens)
    before = tokens[:first_star]
    is_const = is_ptr and "const" in before
    base = normalise_type([w for w in before if w not in ("*", "&")])
    base = re.sub(r"^(std::|::)", "", base)
    if is_ptr and stars > 1:
        kind, size, elem = "o", 8, 8  # pointer to pointer
    elif base in _SCALARS:
        kind, s = _SCALARS[base]
        size, elem = (8, s) if is_ptr else (s, s)
    elif base in _VECTORS:
        kind, es, total = _VECTORS[base]
        size, elem = (8, total) if is_ptr else (total, total)
        kind = "o"
    else:
        kind, size, elem = "o", 8 if is_ptr else 0, 0
    return Param(text=text.strip(), name=name, is_ptr=is_ptr, is_const=is_const, base=base, kind=kind,
                 size=size, elem_size=elem)


# ----------------------------------------------------------------------------- kernels

@dataclass
class Kernel:
    name: str
    line: int
    params_text: list[str]
    template_params: list[tuple[str, str, str | None]] = field(default_factory=list)  # (kind, name, default)

    @property
    def is_template(self) -> bool:
        return bool(self.template_params)

    def params(self, template_args: list[str] | None = None) -> list[Param]:
        subst: dict[str, str] = {}
        if self.template_params:
            args = list(template_args or [])
            for i, (_, pname, default) in enumerate(self.template_params):
                if i < len(args):
                    subst[pname] = args[i]
                elif default is not None:
                    subst[pname] = default
        return [parse_param(p, subst) for p in self.params_text]


def _template_headers(code: str) -> dict[int, tuple[int, str]]:
    """{index after the template header (whitespace skipped): (start, parameter text)}."""
    heads = {}
    for m in re.finditer(r"\btemplate\s*<", code):
        lt = m.end() - 1
        gt = _match_angle(code, lt)
        if gt < 0:
            continue
        k = gt + 1
        while k < len(code) and code[k].isspace():
            k += 1
        heads[k] = (m.start(), code[lt + 1: gt])
    return heads


def _parse_template_params(text: str) -> list[tuple[str, str, str | None]]:
    out = []
    for p in split_top(text):
        default = None
        if "=" in p:
            p, default = p.split("=", 1)
            p, default = p.strip(), default.strip()
        words = p.split()
        if not words:
            continue
        name = words[-1] if len(words) > 1 else ""
        kind = "type" if words[0] in ("typename", "class") else "value"
        out.append((kind, name, default))
    return out


_LEADING = ("static", "inline", "__forceinline__", "__noinline__", "extern", "__host__", "__device__")


def find_kernels(text: str) -> list[Kernel]:
    code = mask_source(text, preprocessor=True)
    heads = _template_headers(code)
    kernels = []
    for m in re.finditer(r"\b__global__\b", code):
        # template header right before (through leading qualifiers)?
        k = m.start()
        j = k
        while True:
            s = j
            while s > 0 and code[s - 1].isspace():
                s -= 1
            w = re.search(r"([A-Za-z_]\w*|\"\s*\")\s*$", code[:s])
            if w and (w.group(1) in _LEADING or w.group(1).startswith('"')):
                j = w.start()
                continue
            break
        tparams: list[tuple[str, str, str | None]] = []
        for pos, (_, ptext) in heads.items():
            if pos == j:
                tparams = _parse_template_params(ptext)
        # the name: the identifier right before the first '(' not belonging to an attribute
        p = m.end()
        name = None
        while p < len(code):
            mm = re.compile(r"\s*([A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)\s*(\()?").match(code, p)
            if not mm:
                break
            ident = mm.group(1)
            if mm.group(2):
                close = _match_close(code, mm.end() - 1, "(", ")")
                if ident in ("__launch_bounds__", "__attribute__", "alignas", "__align__", "__maxnreg__",
                             "__cluster_dims__", "__declspec"):
                    p = close + 1
                    continue
                name = ident
                params = code[mm.end(): close]
                break
            p = mm.end()
        if not name:
            continue
        ptexts = [] if params.strip() in ("", "void") else split_top(params)
        # parameter texts from the unmasked source (string literals never occur there)
        kernels.append(Kernel(name=name, line=line_of(text, m.start()), params_text=ptexts, template_params=tparams))
    return kernels


def split_template_name(spec: str) -> tuple[str, list[str]]:
    """'scale<float, 4>' -> ('scale', ['float', '4'])."""
    spec = spec.strip()
    if "<" not in spec:
        return spec, []
    base = spec[: spec.index("<")].strip()
    inner = spec[spec.index("<") + 1: spec.rindex(">")]
    return base, split_top(inner)


def has_main(text: str) -> bool:
    code = mask_source(text, preprocessor=True)
    return re.search(r"\bint\s+main\s*\(", code) is not None


def local_includes(text: str) -> list[str]:
    return re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, flags=re.M)


# ----------------------------------------------------------------------------- unsupported features

_UNSUPPORTED = [
    (r"\b(asm|__asm__|__asm)\b\s*(volatile|__volatile__)?\s*\(", "inline PTX assembly (`asm(...)`)"),
    (r"\bmma\.sync\b", "PTX `mma.sync`"),
    (r"\bcp\.async\b|__pipeline_memcpy_async|__pipeline_commit|__pipeline_wait_prior|cuda::memcpy_async|cuda::pipeline",
     "asynchronous copies (`cp.async` / `memcpy_async` / pipelines)"),
    (r"\bcooperative_groups\b|\bthis_thread_block\s*\(|\btiled_partition\b|\bthis_grid\s*\(|\bcg::",
     "cooperative groups"),
    (r"\btexture\s*<|\btex[123]D(Layered|Lod|Grad)?\s*(<|\()|\btex1Dfetch\b|\bcudaTextureObject_t\b|"
     r"\bsurf[123]D(read|write)\b|\bcudaSurfaceObject_t\b|\bcudaCreateTextureObject\b", "textures and surfaces"),
    (r"\bwgmma\b|\bcp\.async\.bulk\b|\bcuTensorMapEncode", "Hopper TMA / wgmma"),
]
_UNSUPPORTED_INCLUDES = {
    "cooperative_groups.h": "cooperative groups",
    "cooperative_groups": "cooperative groups",
    "cuda/pipeline": "asynchronous copies (`cuda::pipeline`)",
    "cuda/barrier": "`cuda::barrier`",
    "cuda_pipeline.h": "asynchronous copies (`__pipeline_*`)",
    "cuda_awbarrier.h": "asynchronous barriers",
    "texture_fetch_functions.h": "textures",
    "cub/": "CUB", "thrust/": "Thrust", "cute/": "CuTe", "cutlass/": "CUTLASS",
}


@dataclass
class Unsupported:
    line: int
    feature: str
    text: str


def scan_unsupported(text: str) -> list[Unsupported]:
    found = []
    code = mask_source(text, strings=False, preprocessor=True)  # keep string contents: asm("mma.sync ...")
    plain = mask_source(text, preprocessor=True)
    lines = text.splitlines()
    for pattern, feature in _UNSUPPORTED:
        src = plain if feature.startswith("inline PTX") or feature in ("cooperative groups", "textures and surfaces") else code
        for m in re.finditer(pattern, src):
            ln = line_of(text, m.start())
            found.append(Unsupported(ln, feature, lines[ln - 1].strip() if ln - 1 < len(lines) else ""))
    for m in re.finditer(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', mask_source(text, strings=False), flags=re.M):
        inc = m.group(1)
        for key, feature in _UNSUPPORTED_INCLUDES.items():
            if inc == key or (key.endswith("/") and inc.startswith(key)):
                ln = line_of(text, m.start(1))
                found.append(Unsupported(ln, feature, lines[ln - 1].strip()))
    found.sort(key=lambda u: u.line)
    # one entry per line
    seen, out = set(), []
    for u in found:
        if u.line not in seen:
            seen.add(u.line)
            out.append(u)
    return out


# ----------------------------------------------------------------------------- rewriting for the emulator

_ALIGN_RE = re.compile(r"__align__\s*\(\s*([^)]*)\)|alignas\s*\(\s*([^)]*)\)|__attribute__\s*\(\(\s*aligned\s*\(\s*([^)]*)\)\s*\)\)")


def _replace_keep_lines(out: list[tuple[int, int, str]], text: str, start: int, end: int, repl: str) -> None:
    nl = text.count("\n", start, end)
    out.append((start, end, repl + "\n" * nl))


def _declarator_name(decl: str) -> tuple[str, int, int] | None:
    """The declared name in a declarator like `tile[32][33]`, `*p`, `(x)`, and its span."""
    d = decl
    m = re.search(r"\[", d)
    head = d[: m.start()] if m else d
    ids = list(_IDENT.finditer(head))
    ids = [i for i in ids if i.group(0) not in _QUALIFIERS | {"__restrict__"}]
    if not ids:
        return None
    last = ids[-1]
    return last.group(0), last.start(), last.end()


def rewrite_for_emulator(text: str) -> str:
    code = mask_source(text, preprocessor=True)
    edits: list[tuple[int, int, str]] = []
    counter = 0
    # __shared__ declarations
    for m in re.finditer(r"\b__shared__\b", code):
        # the statement: from the previous ; { } (or line start of a declaration) to the next ;
        s = m.start()
        b = s
        while b > 0 and code[b - 1] not in ";{}":
            b -= 1
        # keep whatever precedes on that line that isn't part of the declaration (e.g. `)` of a for-header) — rare
        e = code.find(";", m.end())
        if e < 0:
            continue
        stmt = code[b:e]
        if "(" in stmt.split("__shared__")[0] and "__align__" not in stmt.split("__shared__")[0] \
                and "alignas" not in stmt.split("__shared__")[0] and "__attribute__" not in stmt.split("__shared__")[0]:
            continue  # something odd (inside a parameter list?) — leave it to the fallback macro
        lead_ws = len(stmt) - len(stmt.lstrip())
        b += lead_ws
        stmt = code[b:e]
        is_extern = re.search(r"\bextern\b", stmt) is not None
        align = "0"
        for am in _ALIGN_RE.finditer(stmt):
            align = next(g for g in am.groups() if g)
        body = _ALIGN_RE.sub(" ", stmt)
        body = re.sub(r"\b(__shared__|extern|static)\b", " ", body)
        body = re.sub(r"\s+", " ", body).strip()
        # type specifiers vs declarators: the declarators start at the first top-level comma-separated
        # item's declared name; find the specifier prefix from the first declarator's name
        decls = split_top(body)
        if not decls:
            continue
        first = _declarator_name(decls[0])
        if first is None:
            continue
        name0, ns, _ = first
        # the specifier prefix ends where the first declarator's pointer/name part starts
        spec_end = ns
        while spec_end > 0 and decls[0][spec_end - 1] in " *&(":
            spec_end -= 1
        spec = decls[0][:spec_end].strip()
        declarators = [decls[0][spec_end:].strip()] + decls[1:]
        if not spec:
            continue
        pieces = []
        for d in declarators:
            dn = _declarator_name(d)
            if dn is None:
                pieces = []
                break
            name, a, z = dn
            counter += 1
            tname = f"hpc_smem_t{counter}_"
            typedef_decl = d[:a] + tname + d[z:]
            if is_extern:
                pieces.append(
                    f"typedef {spec} {typedef_decl}; static {tname}& {name} = "
                    f'::hpc::smem_extern<{tname}>("{name}", __FILE__, __LINE__);')
            else:
                pieces.append(
                    f"typedef {spec} {typedef_decl}; static {tname}& {name} = "
                    f'::hpc::smem_ref<{tname}>({align}, "{name}", __FILE__, __LINE__);')
        if not pieces:
            continue
        _replace_keep_lines(edits, text, b, e + 1, " ".join(pieces))
    # CUDA's __noinline__ (a macro would break libstdc++ 13+, which spells __attribute__((__noinline__)))
    for m in re.finditer(r"\b__noinline__\b", code):
        edits.append((m.start(), m.end(), "__attribute__((noinline))"))
    # <<< >>> launches
    for m in re.finditer(r"<<<", code):
        close = code.find(">>>", m.end())
        if close < 0:
            continue
        cfg = text[m.end(): close]
        edits.append((m.start(), m.end(), " * ::hpc::Cfg("))
        nl = text.count("\n", m.end(), close)
        edits.append((m.end(), close + 3, cfg.replace("\n", " ") + ")" + "\n" * nl))
    # apply (non-overlapping, sorted)
    edits.sort()
    out, pos = [], 0
    for s, e, r in edits:
        if s < pos:
            continue
        out.append(text[pos:s])
        out.append(r)
        pos = e
    out.append(text[pos:])
    return "".join(out)


def strip_host_includes_for_nvrtc(text: str) -> str:
    """NVRTC has no host C/C++ headers: blank the includes of ones CUDA code commonly names
    (keeping the line count); the prelude in gpu.py provides what they would."""
    host = r"(cstdio|stdio\.h|cstdlib|stdlib\.h|cmath|math\.h|cstdint|stdint\.h|cassert|assert\.h|cstring|string\.h|" \
           r"cuda_runtime\.h|cuda_runtime_api\.h|cuda\.h|device_launch_parameters\.h|algorithm|iostream|vector|" \
           r"climits|limits\.h|cfloat|float\.h|type_traits|utility|device_functions\.h|math_constants\.h)"
    return re.sub(r"^[ \t]*#[ \t]*include[ \t]*[<\"]" + host + r"[>\"][^\n]*", "", text, flags=re.M)
