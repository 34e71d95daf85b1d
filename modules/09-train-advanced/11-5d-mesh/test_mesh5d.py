"""Tests for train-11.

Rank groups: against a brute-force enumeration of mesh coordinates (always) and against Megatron-core
0.16.1's own `RankGenerator.get_ranks` (when megatron-core is installed). Config search: memory and
time models against an independent re-derivation of the README formulas, and the chosen config against
a brute-force minimum over every valid config that fits.
"""

import ast
import dataclasses
import importlib.util
import itertools
import math
import pathlib
import random

import pytest

ORDERS = ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-dp", "pp-dp-tp", "dp-tp-cp-pp", "cp-tp-ep-dp-pp"]


@pytest.fixture(scope="module")
def mesh(lesson):
    return lesson.load("mesh5d.py")


def ref_groups(sizes, order, token):
    """Enumerate coordinates (first name fastest), group by the coordinates outside the token."""
    names = order.split("-")
    names += [n for n in ("tp", "cp", "ep", "dp", "pp") if n not in names]
    dims = [sizes.get(n, 1) for n in names]
    inside = set(token.split("-"))
    groups = {}
    for coord in itertools.product(*[range(d) for d in reversed(dims)]):
        coord = coord[::-1]  # coord[i] belongs to names[i]
        rank, stride = 0, 1
        for c, d in zip(coord, dims):
            rank, stride = rank + c * stride, stride * d
        key = tuple(c for c, n in zip(coord, names) if n not in inside)
        groups.setdefault(key, []).append(rank)
    return sorted(sorted(g) for g in groups.values())


def all_tokens(names, rng):
    out = []
    for k in range(1, len(names) + 1):
        for combo in itertools.combinations(names, k):
            combo = list(combo)
            rng.shuffle(combo)  # the token is a set: "dp-tp" is "tp-dp"
            out.append("-".join(combo))
    return out


def random_layouts(rng, n):
    """(sizes, order) pairs with odd factors; ep and cp never both > 1 (Megatron's rule)."""
    out = []
    for _ in range(n):
        order = rng.choice(ORDERS)
        sizes = {d: rng.choice([1, 2, 3, 2, 4]) if d in order else 1 for d in ("tp", "cp", "ep", "dp", "pp")}
        if sizes["cp"] > 1 and sizes["ep"] > 1:
            sizes[rng.choice(["cp", "ep"])] = 1
        out.append((sizes, order))
    return out


def test_rank_groups_match_coordinate_enumeration(mesh):
    rng = random.Random(11)
    cases = [({"tp": 2, "cp": 2, "ep": 1, "dp": 2, "pp": 2}, "tp-cp-ep-dp-pp")] + random_layouts(rng, 25)
    for sizes, order in cases:
        for token in all_tokens(order.split("-"), rng):
            want = ref_groups(sizes, order, token)
            got = mesh.rank_groups(sizes, order, token)
            assert got == want, f"sizes {sizes}, order {order}, token {token}: {got} != {want}"
    with pytest.raises(ValueError):  # cp = 2 but the order does not place it
        mesh.rank_groups({"tp": 2, "cp": 2, "dp": 2}, "tp-dp", "dp")


def test_ep_is_folded_into_the_expert_data_parallel_size(mesh):
    assert mesh.dense_sizes(48, 2, 3, 2) == {"tp": 2, "cp": 3, "ep": 1, "dp": 4, "pp": 2}
    # 48 GPUs, pp 2, 4 experts groups of expert-TP 3: expert dp = 48 / (3*4*2) = 2, whatever the dense tp/cp are
    assert mesh.expert_sizes(48, 2, 4, 3) == {"tp": 3, "cp": 1, "ep": 4, "dp": 2, "pp": 2}
    assert mesh.expert_sizes(64, 2, 8, 1) == {"tp": 1, "cp": 1, "ep": 8, "dp": 4, "pp": 2}
    # every factor is checked: each case below divides by all but one of them
    for world, tp, cp, pp in [(40, 3, 1, 2), (8, 3, 1, 1), (8, 1, 3, 1), (8, 1, 1, 3), (12, 2, 2, 2)]:
        with pytest.raises(ValueError):
            mesh.dense_sizes(world, tp, cp, pp)
    for world, pp, ep, etp in [(40, 1, 3, 1), (8, 1, 1, 3), (8, 3, 1, 1), (12, 1, 2, 8), (12, 2, 2, 2)]:
        with pytest.raises(ValueError):
            mesh.expert_sizes(world, pp, ep, etp)


@pytest.fixture(scope="module")
def rank_generator():
    """megatron.core.parallel_state.RankGenerator of the installed Megatron-core (0.16.1), run as is.

    Importing megatron.core runs its __init__, which loads the whole training stack (10-20 s). The class
    and the one function it calls (generate_masked_orthogonal_rank_groups) are pure Python over lists,
    so they are taken from the installed parallel_state.py with `ast` and executed alone.
    """
    spec = importlib.util.find_spec("megatron.core")
    source = (pathlib.Path(spec.submodule_search_locations[0]) / "parallel_state.py").read_text()
    wanted = {"RankGenerator", "generate_masked_orthogonal_rank_groups"}
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if getattr(n, "name", None) in wanted]
    assert len(tree.body) == 2, "parallel_state.py no longer defines RankGenerator as expected"
    namespace = {"List": list}  # the annotations only
    exec(compile(tree, "megatron/core/parallel_state.py", "exec"), namespace)
    return namespace["RankGenerator"]


@pytest.mark.requires("megatron-core")
@pytest.mark.points(2)
def test_groups_equal_megatron_rank_generator(mesh, rank_generator):
    rng = random.Random(1111)
    checked = 0
    for world, tp, cp, pp, ep, etp in [(16, 2, 2, 2, 4, 1), (48, 2, 3, 2, 4, 3), (24, 3, 1, 2, 2, 2),
                                       (36, 3, 2, 3, 3, 2), (8, 1, 1, 1, 8, 1), (12, 1, 3, 1, 3, 4)]:
        for order in ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"):
            dense = mesh.dense_sizes(world, tp, cp, pp)
            gen = rank_generator(tp=tp, ep=1, dp=world // (tp * cp * pp), pp=pp, cp=cp, order=order)
            for token in all_tokens(["tp", "cp", "dp", "pp"], rng):
                assert mesh.rank_groups(dense, order, token) == gen.get_ranks(token), (world, order, token)
                checked += 1
            expert = mesh.expert_sizes(world, pp, ep, etp)
            egen = rank_generator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
            for token in all_tokens(["tp", "ep", "dp", "pp"], rng):
                assert mesh.rank_groups(expert, order, token) == egen.get_ranks(token), (world, order, token)
                checked += 1
    for sizes, order in random_layouts(rng, 15):
        gen = rank_generator(order=order, **sizes)
        for token in all_tokens(order.split("-"), rng):
            assert mesh.rank_groups(sizes, order, token) == gen.get_ranks(token), (sizes, order, token)
    assert checked > 300


# ---------------------------------------------------------------- config search

def ref_memory(model, c):
    p = 12 * model.layers * model.hidden**2 + model.vocab * model.hidden
    per_param = 2 + 2 + 12 / (c.dp * c.cp) if c.zero1 else 2 + 2 + 4 + 4 + 4  # bf16 w, g; fp32 master, m, v
    micro = model.global_batch // (c.dp * model.micro_batch)
    per_layer = 34 * model.seq * model.micro_batch * model.hidden / c.tp / c.cp  # SP + selective recompute
    return p / c.tp / c.pp * per_param + per_layer * (model.layers // c.pp) * min(c.pp, micro)


def ref_time(model, c, cl, order="tp-cp-ep-dp-pp"):
    p = 12 * model.layers * model.hidden**2 + model.vocab * model.hidden
    sbh = model.seq * model.micro_batch * model.hidden
    micro = model.global_batch // (c.dp * model.micro_batch)
    work = micro * (model.layers // c.pp)  # (micro-batch, layer) pairs on one GPU
    sizes = {"tp": c.tp, "cp": c.cp, "ep": 1, "dp": c.dp, "pp": c.pp}

    def bw(token):
        groups = ref_groups(sizes, order, token)
        one_node = all(len({r // cl.gpus_per_node for r in g}) == 1 for g in groups)
        return cl.intra_bw if one_node else cl.inter_bw

    def ring(n):
        return (n - 1) / n

    total = 6 * p * model.global_batch * model.seq / cl.n_gpus / cl.flops * (micro + c.pp - 1) / micro
    total += work * 8 * ring(c.tp) * 2 * sbh / c.cp / bw("tp")
    total += work * 12 * ring(c.cp) * sbh / c.tp / bw("cp")
    total += 2 * ring(c.dp * c.cp) * 2 * p / (c.tp * c.pp) / bw("cp-dp")
    total += (c.pp > 1) * 2 * micro * 2 * sbh / (c.tp * c.cp) / bw("pp")
    return total


MODELS = [  # (model kwargs, cluster kwargs)
    (dict(layers=32, hidden=4096, heads=32, vocab=32000, seq=4096, global_batch=256), dict(n_gpus=32)),
    (dict(layers=80, hidden=8192, heads=64, vocab=128000, seq=8192, global_batch=96), dict(n_gpus=48)),
    (dict(layers=48, hidden=6144, heads=48, vocab=50000, seq=32768, global_batch=24, micro_batch=1),
     dict(n_gpus=24, gpus_per_node=4, mem_bytes=80e9, inter_bw=25e9)),
    (dict(layers=24, hidden=2048, heads=16, vocab=32000, seq=2048, global_batch=120), dict(n_gpus=12)),
    # micro-batch 2, fewer micro-batches than stages in some configs (m < pp), a slower GPU and NVLink
    (dict(layers=16, hidden=1024, heads=8, vocab=32000, seq=2048, global_batch=16, micro_batch=2),
     dict(n_gpus=16, flops=500e12, intra_bw=300e9)),
]


def problems(mesh):
    return [(mesh.Model(**m), mesh.Cluster(**c)) for m, c in MODELS]


def test_memory_model(mesh):
    for model, cl in problems(mesh):
        for c in mesh.valid_configs(model, cl):
            got, want = mesh.memory_per_gpu(model, c), ref_memory(model, c)
            assert math.isclose(got, want, rel_tol=1e-9), f"{model} {c}: {got:.6g} B != {want:.6g} B"


def test_time_model(mesh):
    for model, cl in problems(mesh):
        for c in mesh.valid_configs(model, cl):
            got, want = mesh.step_time(model, c, cl), ref_time(model, c, cl)
            assert math.isclose(got, want, rel_tol=1e-9), f"{model} {c}: {got:.6g} s != {want:.6g} s"
    model, cl = problems(mesh)[0]
    c = mesh.Config(tp=2, cp=2, pp=2, dp=4)  # a different layout order moves groups across nodes
    for order in ORDERS[:2] + ["dp-cp-tp-pp", "pp-dp-cp-tp"]:
        assert math.isclose(mesh.step_time(model, c, cl, order), ref_time(model, c, cl, order), rel_tol=1e-9), order


@pytest.mark.points(2)
def test_search_picks_the_fastest_config_that_fits(mesh):
    saw_oom_winner = False
    for model, cl in problems(mesh):
        configs = mesh.valid_configs(model, cl)
        fits = [c for c in configs if ref_memory(model, c) <= cl.mem_bytes]
        best = mesh.best_config(model, cl)
        assert best is not None and best in configs, f"{model}: returned {best}"
        assert ref_memory(model, best) <= cl.mem_bytes, f"{model}: {best} needs {ref_memory(model, best):.4g} B"
        fastest_fit = min(ref_time(model, c, cl) for c in fits)
        assert math.isclose(ref_time(model, best, cl), fastest_fit, rel_tol=1e-12), f"{model}: {best} is not the fastest"
        saw_oom_winner |= min(ref_time(model, c, cl) for c in configs) < fastest_fit
    assert saw_oom_winner  # the fixtures include a model whose fastest config does not fit
    huge = mesh.Model(layers=8, hidden=16384, heads=8, vocab=32000, seq=4096, global_batch=8)
    assert mesh.best_config(huge, mesh.Cluster(n_gpus=2, mem_bytes=40e9)) is None


def test_search_exact_fit_and_layout_order(mesh):
    """A config that needs exactly the HBM fits (<=); the search prices groups under the order it is given."""
    (model, cl), (model1, cl1) = problems(mesh)[:2]
    configs = mesh.valid_configs(model, cl)
    by_time = sorted(configs, key=lambda c: ref_time(model, c, cl))
    twin = dataclasses.replace(by_time[0], zero1=True)  # same time as the fastest, less memory
    assert twin in configs and ref_time(model, by_time[2], cl) > ref_time(model, twin, cl) * (1 + 1e-9)
    exact = dataclasses.replace(cl, mem_bytes=mesh.memory_per_gpu(model, twin))  # the learner's own number
    assert mesh.best_config(model, exact) == twin, "a config that exactly fills the HBM must count as fitting"
    for (mo, clu), order in [((model, cl), "tp-cp-ep-pp-dp"), ((model1, cl1), "pp-dp-cp-tp")]:
        fits = [c for c in mesh.valid_configs(mo, clu) if ref_memory(mo, c) <= clu.mem_bytes]
        want = min(ref_time(mo, c, clu, order) for c in fits)
        default_best = min(fits, key=lambda c: ref_time(mo, c, clu))
        assert ref_time(mo, default_best, clu, order) > want * (1 + 1e-9)  # the order changes the answer
        best = mesh.best_config(mo, clu, order)
        assert best in fits, f"{mo} under {order}: returned {best}"
        assert math.isclose(ref_time(mo, best, clu, order), want, rel_tol=1e-12), \
            f"{mo} under order {order}: {best} is not the fastest (was it priced under the default order?)"
