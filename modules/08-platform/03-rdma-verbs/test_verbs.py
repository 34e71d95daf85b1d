"""platform-03 tests: the QP state table against the kernel's, ibv_modify_qp's all-or-nothing
EINVAL, one-sided WRITE/READ against a bytearray reference with every access rule, and RC
completion order with coalesced ACKs, errors and flushes."""

from __future__ import annotations

import random

import pytest

# Bit values from rdma-core libibverbs/verbs.h, written out here so that the reference does not
# depend on the learner's module.
BIT = {name: 1 << b for b, name in enumerate(
    "STATE CUR_STATE EN_SQD_ASYNC_NOTIFY ACCESS_FLAGS PKEY_INDEX PORT QKEY AV PATH_MTU TIMEOUT "
    "RETRY_CNT RNR_RETRY RQ_PSN MAX_QP_RD_ATOMIC ALT_PATH MIN_RNR_TIMER SQ_PSN "
    "MAX_DEST_RD_ATOMIC PATH_MIG_STATE CAP DEST_QPN".split())}
BIT["RATE_LIMIT"] = 1 << 25
STATES = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"]
TYPES = ["RC", "UC", "UD"]


def m(names: str) -> int:
    return sum(BIT[n] for n in names.split())


# Transcribed entry by entry from qp_state_table in drivers/infiniband/core/verbs.c
# (torvalds/linux via gregkh/linux @ 253c2ed71a), RC/UC/UD columns only: (cur, nxt) -> {type: (req, opt)}.
K: dict[tuple[str, str], dict[str, tuple[str, str]]] = {
    ("RESET", "RESET"): {},
    ("RESET", "INIT"): {"UD": ("PKEY_INDEX PORT QKEY", ""), "UC": ("PKEY_INDEX PORT ACCESS_FLAGS", ""),
                        "RC": ("PKEY_INDEX PORT ACCESS_FLAGS", "")},
    ("INIT", "INIT"): {"UD": ("", "PKEY_INDEX PORT QKEY"), "UC": ("", "PKEY_INDEX PORT ACCESS_FLAGS"),
                       "RC": ("", "PKEY_INDEX PORT ACCESS_FLAGS")},
    ("INIT", "RTR"): {"UD": ("", "PKEY_INDEX QKEY"),
                      "UC": ("AV PATH_MTU DEST_QPN RQ_PSN", "ALT_PATH ACCESS_FLAGS PKEY_INDEX"),
                      "RC": ("AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER",
                             "ALT_PATH ACCESS_FLAGS PKEY_INDEX")},
    ("RTR", "RTS"): {"UD": ("SQ_PSN", "CUR_STATE QKEY"),
                     "UC": ("SQ_PSN", "CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE"),
                     "RC": ("TIMEOUT RETRY_CNT RNR_RETRY SQ_PSN MAX_QP_RD_ATOMIC",
                            "CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE")},
    ("RTS", "RTS"): {"UD": ("", "CUR_STATE QKEY"),
                     "UC": ("", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE"),
                     "RC": ("", "CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER")},
    ("RTS", "SQD"): {t: ("", "EN_SQD_ASYNC_NOTIFY") for t in TYPES},
    ("SQD", "RTS"): {"UD": ("", "CUR_STATE QKEY"),
                     "UC": ("", "CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE"),
                     "RC": ("", "CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE")},
    ("SQD", "SQD"): {"UD": ("", "PKEY_INDEX QKEY"),
                     "UC": ("", "AV ALT_PATH ACCESS_FLAGS PKEY_INDEX PATH_MIG_STATE"),
                     "RC": ("", "PORT AV TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC "
                                "MAX_DEST_RD_ATOMIC ALT_PATH ACCESS_FLAGS PKEY_INDEX "
                                "MIN_RNR_TIMER PATH_MIG_STATE")},
    ("SQE", "RTS"): {"UD": ("", "CUR_STATE QKEY"), "UC": ("", "CUR_STATE ACCESS_FLAGS")},
}
for _s in STATES[1:]:
    K[(_s, "RESET")] = {}
    K[(_s, "ERR")] = {}


def kernel_is_ok(cur: str, nxt: str, t: str, mask: int) -> bool:
    """ib_modify_qp_is_ok, line by line."""
    if mask & BIT["CUR_STATE"] and cur not in ("RTR", "RTS", "SQD", "SQE"):
        return False
    if (cur, nxt) not in K:
        return False
    req, opt = (m(x) for x in K[(cur, nxt)].get(t, ("", "")))
    if mask & req != req:
        return False
    return not mask & ~(req | opt | BIT["STATE"])


def probes(cur: str, nxt: str, t: str, rng: random.Random) -> list[int]:
    req, opt = (m(x) for x in K.get((cur, nxt), {}).get(t, ("", "")))
    base = BIT["STATE"] | req
    out = [base, base | opt, base & ~BIT["STATE"]]
    out += [base & ~b for b in BIT.values() if b & req]  # one required bit missing
    out += [base | b for b in BIT.values()]  # one more bit (legal only if optional)
    out += [BIT["STATE"] | rng.getrandbits(21) for _ in range(6)]
    return out


@pytest.mark.points(1)
def test_state_table_matches_the_kernel_table(lesson):
    v = lesson.load("verbs.py")
    rng = random.Random(3)
    wrong = []
    for cur in STATES:
        for nxt in STATES:
            for t in TYPES:
                for mask in probes(cur, nxt, t, rng):
                    got = v.modify_qp_is_ok(v.QPS[cur], v.QPS[nxt], v.QPT[t], mask)
                    if bool(got) != kernel_is_ok(cur, nxt, t, mask):
                        names = [n for n, b in BIT.items() if mask & b]
                        wrong.append(f"{t} {cur}->{nxt} {'|'.join(names)}: got {got}")
    assert not wrong, f"{len(wrong)} verdicts differ from ib_modify_qp_is_ok, e.g. {wrong[:4]}"


def bring_up(v, qp, t: str) -> None:
    """RESET -> INIT -> RTR -> RTS with exactly the bits ibv_modify_qp(3) requires."""
    for cur, nxt in (("RESET", "INIT"), ("INIT", "RTR"), ("RTR", "RTS")):
        qp.modify_qp(v.QPAttr(v.QPS[nxt]), BIT["STATE"] | m(K[(cur, nxt)].get(t, ("", ""))[0]))
        assert qp.state == v.QPS[nxt]


@pytest.mark.points(1)
@pytest.mark.parametrize("t", TYPES)
def test_modify_qp_is_all_or_nothing_with_einval(lesson, t):
    v = lesson.load("verbs.py")
    a, b = v.Node(), v.Node(0x5500_0000_0000)
    qp = v.QP(a, b, v.QPT[t])

    def refused(nxt: str, mask: int, **kw) -> None:
        before = qp.state
        with pytest.raises(v.VerbsError) as e:
            qp.modify_qp(v.QPAttr(v.QPS[nxt], **kw), mask)
        assert e.value.errno_name == "EINVAL"
        assert qp.state == before, "a refused ibv_modify_qp must not change the state"

    refused("RTR", BIT["STATE"] | m("AV PATH_MTU DEST_QPN RQ_PSN"))  # RESET -> RTR skips INIT
    refused("ERR", BIT["STATE"])  # the kernel table has no RESET -> ERR
    init_req = m(K[("RESET", "INIT")][t][0])
    refused("INIT", BIT["STATE"] | init_req | BIT["SQ_PSN"])  # extra bit
    refused("INIT", BIT["STATE"] | BIT["CUR_STATE"] | init_req, cur_qp_state=v.QPS.RESET)
    bring_up(v, qp, t)
    refused("RTS", BIT["STATE"] | BIT["PORT"])  # RTS -> RTS may not change the port
    qp.modify_qp(v.QPAttr(v.QPS.SQD), BIT["STATE"] | BIT["EN_SQD_ASYNC_NOTIFY"])
    qp.modify_qp(v.QPAttr(v.QPS.RTS, cur_qp_state=v.QPS.SQD), BIT["STATE"] | BIT["CUR_STATE"])
    assert qp.state == v.QPS.RTS
    qp.modify_qp(v.QPAttr(v.QPS.ERR), BIT["STATE"])
    refused("RTS", BIT["STATE"])  # out of ERR only through RESET
    qp.modify_qp(v.QPAttr(v.QPS.RESET), BIT["STATE"])
    bring_up(v, qp, t)


def rc_pair(v, rng: random.Random, size: int = 301):
    """Node a with a local MR (LOCAL_WRITE), node b with a remote MR readable and writable."""
    a, b = v.Node(0x7F00_0000_0000 + rng.randrange(1 << 20)), v.Node(0x5500_0000_0000)
    local = a.reg_mr(bytes(rng.randrange(1, 256) for _ in range(size)), v.IBV_ACCESS_LOCAL_WRITE)
    remote = b.reg_mr(bytes(rng.randrange(1, 256) for _ in range(size + 16)),
                      v.IBV_ACCESS_LOCAL_WRITE | v.IBV_ACCESS_REMOTE_WRITE | v.IBV_ACCESS_REMOTE_READ)
    qp = v.QP(a, b, v.QPT.RC)
    bring_up(v, qp, "RC")
    return qp, local, remote


def random_wr(v, rng, wr_id, local, remote):
    n = rng.choice([1, 7, rng.randrange(1, local.length)])
    lo = rng.choice([0, local.length - n, rng.randrange(local.length - n + 1)])
    ro = rng.choice([0, remote.length - n, rng.randrange(remote.length - n + 1)])
    op = rng.choice([v.Opcode.RDMA_WRITE, v.Opcode.RDMA_READ])
    return v.SendWR(wr_id, op, local.addr + lo, n, local.lkey, remote.addr + ro, remote.rkey)


def apply_ref(wr, v, lbuf: bytearray, rbuf: bytearray, local, remote) -> None:
    lo, ro, n = wr.local_addr - local.addr, wr.remote_addr - remote.addr, wr.length
    if wr.opcode == v.Opcode.RDMA_WRITE:
        rbuf[ro:ro + n] = lbuf[lo:lo + n]
    else:
        lbuf[lo:lo + n] = rbuf[ro:ro + n]


@pytest.mark.points(1)
def test_one_sided_ops_and_access_rules(lesson):
    v = lesson.load("verbs.py")
    with pytest.raises(v.VerbsError) as e:
        v.Node().reg_mr(b"x" * 8, v.IBV_ACCESS_REMOTE_WRITE | v.IBV_ACCESS_REMOTE_READ)
    assert e.value.errno_name == "EINVAL", "REMOTE_WRITE without LOCAL_WRITE must be EINVAL"
    v.Node().reg_mr(b"x" * 8, v.IBV_ACCESS_REMOTE_READ)  # read-only remote access is fine
    with pytest.raises(v.VerbsError) as e:
        v.Node().reg_mr(b"x" * 8, v.IBV_ACCESS_REMOTE_ATOMIC)
    assert e.value.errno_name == "EINVAL", "REMOTE_ATOMIC without LOCAL_WRITE must be EINVAL"
    v.Node().reg_mr(b"x" * 8, v.IBV_ACCESS_REMOTE_ATOMIC | v.IBV_ACCESS_LOCAL_WRITE)
    rng = random.Random(7)
    qp, local, remote = rc_pair(v, rng)
    lbuf, rbuf = bytearray(local.buf), bytearray(remote.buf)
    for i in range(60):
        wr = random_wr(v, rng, i, local, remote)
        qp.post_send(wr)
        apply_ref(wr, v, lbuf, rbuf, local, remote)
    qp.ack(59)
    assert [(w.wr_id, w.status) for w in qp.cq] == [(i, v.WCStatus.SUCCESS) for i in range(60)]
    assert local.buf == lbuf and remote.buf == rbuf, "memory differs from the reference"
    for case, status in _violations(v, rng):
        qp, local, remote = rc_pair(v, rng)
        before = (bytes(local.buf), bytes(remote.buf))
        qp.post_send(case(v, local, remote, qp))
        qp.ack(0)
        got = [(w.wr_id, w.status) for w in qp.cq]
        assert got == [(0, status)], f"{case.__doc__}: expected {status.name}, CQ holds {got}"
        assert qp.state == v.QPS.ERR, f"{case.__doc__}: a failed WR moves the QP to ERR"
        assert (bytes(local.buf), bytes(remote.buf)) == before, f"{case.__doc__}: memory was touched"


def _violations(v, rng):
    W, R = v.Opcode.RDMA_WRITE, v.Opcode.RDMA_READ
    s = v.WCStatus

    def wrong_lkey(v, lo, re, qp):
        """lkey (and address range) of the peer's MR used in the local SGE"""
        return v.SendWR(0, W, re.addr, 8, re.lkey, re.addr + 16, re.rkey)

    def local_past_end(v, lo, re, qp):
        """local range one byte past the MR"""
        return v.SendWR(0, W, lo.addr + lo.length - 7, 8, lo.lkey, re.addr, re.rkey)

    def local_before_start(v, lo, re, qp):
        """local range starting one byte before the MR"""
        return v.SendWR(0, W, lo.addr - 1, 8, lo.lkey, re.addr, re.rkey)

    def read_into_readonly(v, lo, re, qp):
        """READ into a local MR without LOCAL_WRITE"""
        ro = qp.node.reg_mr(b"q" * 32, v.IBV_ACCESS_REMOTE_READ)
        return v.SendWR(0, R, ro.addr, 8, ro.lkey, re.addr, re.rkey)

    def wrong_rkey(v, lo, re, qp):
        """rkey of a remotely writable MR of the LOCAL node sent to the peer (the peer has no such rkey)"""
        own = qp.node.reg_mr(b"o" * 64, v.IBV_ACCESS_LOCAL_WRITE | v.IBV_ACCESS_REMOTE_WRITE | v.IBV_ACCESS_REMOTE_READ)
        return v.SendWR(0, W, lo.addr, 8, lo.lkey, own.addr, own.rkey)

    def remote_past_end(v, lo, re, qp):
        """remote range one byte past the MR"""
        return v.SendWR(0, R, lo.addr, 8, lo.lkey, re.addr + re.length - 7, re.rkey)

    def remote_before_start(v, lo, re, qp):
        """remote range starting one byte before the MR"""
        return v.SendWR(0, W, lo.addr, 8, lo.lkey, re.addr - 1, re.rkey)

    def write_to_read_only(v, lo, re, qp):
        """WRITE to a remote MR with REMOTE_READ only"""
        ro = qp.peer.reg_mr(b"r" * 64, v.IBV_ACCESS_REMOTE_READ)
        return v.SendWR(0, W, lo.addr, 8, lo.lkey, ro.addr + 3, ro.rkey)

    def read_from_write_only(v, lo, re, qp):
        """READ from a remote MR with REMOTE_WRITE only"""
        wo = qp.peer.reg_mr(b"w" * 64, v.IBV_ACCESS_LOCAL_WRITE | v.IBV_ACCESS_REMOTE_WRITE)
        return v.SendWR(0, R, lo.addr, 8, lo.lkey, wo.addr + 3, wo.rkey)

    loc = [wrong_lkey, local_past_end, local_before_start, read_into_readonly]
    rem = [wrong_rkey, remote_past_end, remote_before_start, write_to_read_only, read_from_write_only]
    return [(c, s.LOC_PROT_ERR) for c in loc] + [(c, s.REM_ACCESS_ERR) for c in rem]


def bad_wr(v, wr_id, local, remote, rng):
    return v.SendWR(wr_id, rng.choice(list(v.Opcode)), local.addr, 4, local.lkey,
                    remote.addr + remote.length - 2, remote.rkey)


@pytest.mark.points(1)
@pytest.mark.parametrize("seed", range(12))
def test_rc_completions_in_post_order_then_flush(lesson, seed):
    v = lesson.load("verbs.py")
    rng = random.Random(100 + seed)
    qp, local, remote = rc_pair(v, rng, size=rng.choice([17, 64, 301]))
    lbuf, rbuf = bytearray(local.buf), bytearray(remote.buf)
    n = rng.randrange(3, 14)
    fail = rng.randrange(n) if seed % 3 else None
    statuses = {}
    for i in range(n):
        wr = bad_wr(v, i, local, remote, rng) if i == fail else random_wr(v, rng, i, local, remote)
        qp.post_send(wr)
        if fail is None or i < fail:
            apply_ref(wr, v, lbuf, rbuf, local, remote)
            statuses[i] = v.WCStatus.SUCCESS
        else:
            statuses[i] = v.WCStatus.REM_ACCESS_ERR if i == fail else v.WCStatus.WR_FLUSH_ERR
    assert local.buf == lbuf and remote.buf == rbuf, "the responder must execute nothing after a failed WR"
    assert qp.cq == [], "no completion before the ACK arrives"
    done = 0
    acks = sorted(rng.sample(range(n), k=rng.randrange(1, n + 1)))
    for a in acks + [rng.randrange(n), n + 5]:  # coalesced ACKs, then a stale one and an unknown id
        before = len(qp.cq)
        qp.ack(a)
        if fail is not None and a >= fail and done <= fail:
            done = n
        else:
            done = max(done, a + 1) if a < n else done
        want = [(i, statuses[i]) for i in range(done)]
        got = [(w.wr_id, w.status) for w in qp.cq]
        assert got == want, f"after ack({a}) (CQ had {before} entries): got {got}, want {want}"
    qp.ack(n - 1)
    assert [(w.wr_id, w.status) for w in qp.cq] == [(i, statuses[i]) for i in range(n)]
    ok = [w for w in qp.cq if w.status == v.WCStatus.SUCCESS]
    assert all(w.opcode is not None for w in ok)
    assert qp.state == (v.QPS.RTS if fail is None else v.QPS.ERR)
    if fail is not None:  # posting into ERR: accepted and flushed at once
        qp.post_send(random_wr(v, rng, 99, local, remote))
        assert (qp.cq[-1].wr_id, qp.cq[-1].status) == (99, v.WCStatus.WR_FLUSH_ERR)
        assert local.buf == lbuf and remote.buf == rbuf


@pytest.mark.points(1)
def test_stale_and_unknown_acks_change_nothing(lesson):
    v = lesson.load("verbs.py")
    rng = random.Random(23)
    qp, local, remote = rc_pair(v, rng)
    for i in range(6):
        qp.post_send(random_wr(v, rng, 10 + i, local, remote))
    qp.ack(99)                                   # unknown id before any ACK
    assert qp.cq == [], "an ACK for an id that was never posted completes nothing"
    qp.ack(12)                                   # cumulative: 10, 11, 12
    qp.ack(11)                                   # stale
    qp.ack(3)                                    # unknown
    assert [w.wr_id for w in qp.cq] == [10, 11, 12], "stale or unknown ids must not complete outstanding WRs"
    assert [w.wr_id for w, _ in qp.outstanding] == [13, 14, 15]
    qp.ack(15)
    assert [(w.wr_id, w.status) for w in qp.cq] == [(10 + i, v.WCStatus.SUCCESS) for i in range(6)]


@pytest.mark.points(1)
def test_post_send_rules_per_state_and_type(lesson):
    v = lesson.load("verbs.py")
    rng = random.Random(11)
    a, b = v.Node(), v.Node(0x5500_0000_0000)
    local = a.reg_mr(b"a" * 64, v.IBV_ACCESS_LOCAL_WRITE)
    remote = b.reg_mr(b"b" * 64, v.IBV_ACCESS_LOCAL_WRITE | v.IBV_ACCESS_REMOTE_WRITE
                      | v.IBV_ACCESS_REMOTE_READ)
    wr = v.SendWR(1, v.Opcode.RDMA_WRITE, local.addr, 8, local.lkey, remote.addr, remote.rkey)
    qp = v.QP(a, b, v.QPT.RC)
    for step in (("RESET", "INIT"), ("INIT", "RTR")):
        qp.modify_qp(v.QPAttr(v.QPS[step[1]]), BIT["STATE"] | m(K[step]["RC"][0]))
        with pytest.raises(v.VerbsError) as e:
            qp.post_send(wr)
        assert e.value.errno_name == "EINVAL"
    for t, op in (("UD", v.Opcode.RDMA_WRITE), ("UD", v.Opcode.RDMA_READ), ("UC", v.Opcode.RDMA_READ)):
        q = v.QP(a, b, v.QPT[t])
        bring_up(v, q, t)
        with pytest.raises(v.VerbsError):
            q.post_send(v.SendWR(2, op, local.addr, 8, local.lkey, remote.addr, remote.rkey))
    qp, local, remote = rc_pair(v, rng)
    for i in range(5):
        qp.post_send(random_wr(v, rng, i, local, remote))
    qp.ack(1)
    qp.modify_qp(v.QPAttr(v.QPS.ERR), BIT["STATE"])  # moving to ERR flushes what is outstanding
    want = [(0, 0), (1, 0), (2, 5), (3, 5), (4, 5)]
    assert [(w.wr_id, int(w.status)) for w in qp.cq] == want
