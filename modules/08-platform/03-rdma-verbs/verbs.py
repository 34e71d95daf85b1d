"""platform-03: a model of RDMA verbs — the QP state machine of ibv_modify_qp and one-sided
RDMA WRITE / READ on an RC queue pair, with completions in post order.

There is no RDMA device here, so this file models what libibverbs and the HCA do:
- `modify_qp_is_ok` decides whether a state transition with a given attribute mask is legal for a
  QP type (RC / UC / UD): the transition must exist, every required attribute bit must be in the
  mask, and no bit outside required | optional | IBV_QP_STATE may be (the rule of the kernel's
  `ib_modify_qp_is_ok`, drivers/infiniband/core/verbs.c). An illegal call fails with EINVAL and
  changes nothing.
- `Node.reg_mr` registers a memory region (lkey for local use, rkey for the peer).
- `QP.post_send` executes an RDMA WRITE / READ against the peer's memory right away (the wire is
  in order), but its completion waits for the transport ACK; `QP.ack(wr_id)` delivers a
  cumulative ACK (RC acknowledges every PSN up to and including this one).
Names and values follow rdma-core libibverbs/verbs.h.
"""

from __future__ import annotations

import enum
import functools
import itertools
from dataclasses import dataclass, field


class QPS(enum.IntEnum):
    """enum ibv_qp_state."""
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class QPT(enum.IntEnum):
    """enum ibv_qp_type (the three this lesson models)."""
    RC = 2
    UC = 3
    UD = 4


# enum ibv_qp_attr_mask
IBV_QP_STATE = 1 << 0
IBV_QP_CUR_STATE = 1 << 1
IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2
IBV_QP_ACCESS_FLAGS = 1 << 3
IBV_QP_PKEY_INDEX = 1 << 4
IBV_QP_PORT = 1 << 5
IBV_QP_QKEY = 1 << 6
IBV_QP_AV = 1 << 7
IBV_QP_PATH_MTU = 1 << 8
IBV_QP_TIMEOUT = 1 << 9
IBV_QP_RETRY_CNT = 1 << 10
IBV_QP_RNR_RETRY = 1 << 11
IBV_QP_RQ_PSN = 1 << 12
IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13
IBV_QP_ALT_PATH = 1 << 14
IBV_QP_MIN_RNR_TIMER = 1 << 15
IBV_QP_SQ_PSN = 1 << 16
IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17
IBV_QP_PATH_MIG_STATE = 1 << 18
IBV_QP_CAP = 1 << 19
IBV_QP_DEST_QPN = 1 << 20
IBV_QP_RATE_LIMIT = 1 << 25
ALL_MASK_BITS = [1 << b for b in (*range(21), 25)]

# enum ibv_access_flags
IBV_ACCESS_LOCAL_WRITE = 1
IBV_ACCESS_REMOTE_WRITE = 1 << 1
IBV_ACCESS_REMOTE_READ = 1 << 2
IBV_ACCESS_REMOTE_ATOMIC = 1 << 3


class WCStatus(enum.IntEnum):
    """enum ibv_wc_status (the first entries)."""
    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10


class Opcode(enum.IntEnum):
    RDMA_WRITE = 0
    RDMA_READ = 4


class VerbsError(Exception):
    """A verb that failed returns an errno in C; here it raises with the errno's name."""

    def __init__(self, errno_name: str, detail: str = "") -> None:
        super().__init__(f"{errno_name}: {detail}")
        self.errno_name = errno_name


@dataclass
class MR:
    buf: bytearray
    addr: int  # virtual address of buf[0]
    lkey: int
    rkey: int
    access: int

    @property
    def length(self) -> int:
        return len(self.buf)


@dataclass
class SendWR:
    wr_id: int
    opcode: Opcode
    local_addr: int  # the scatter/gather entry: addr, length, lkey
    length: int
    lkey: int
    remote_addr: int
    rkey: int


@dataclass
class WC:
    wr_id: int
    status: WCStatus
    opcode: Opcode | None  # valid only when status is SUCCESS (as in ibv_wc)


@dataclass
class QPAttr:
    qp_state: QPS
    cur_qp_state: QPS | None = None
    values: dict[str, int] = field(default_factory=dict)  # the other attributes, by name


_keys = itertools.count(0x1000, 0x11)


class Node:
    """One host: its registered memory regions, looked up by lkey (own QPs) or rkey (the peer's)."""

    def __init__(self, base_addr: int = 0x7F00_0000_0000) -> None:
        self.next_addr = base_addr
        self.by_lkey: dict[int, MR] = {}
        self.by_rkey: dict[int, MR] = {}

    def reg_mr(self, data: bytes | bytearray, access: int) -> MR:
        """ibv_reg_mr: remote write or remote atomic access needs local write as well (EINVAL)."""
        ### HINT: ibv_reg_mr(3): which remote access flags require IBV_ACCESS_LOCAL_WRITE?
        ### BEGIN SOLUTION
        remote_modify = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC
        if access & remote_modify and not access & IBV_ACCESS_LOCAL_WRITE:
            raise VerbsError("EINVAL", "remote write/atomic access without local write")
        ### END SOLUTION
        mr = MR(bytearray(data), self.next_addr, next(_keys), next(_keys), access)
        self.next_addr += len(data) + 4096
        self.by_lkey[mr.lkey] = mr
        self.by_rkey[mr.rkey] = mr
        return mr


Table = dict[tuple[QPS, QPS], tuple[dict[QPT, int], dict[QPT, int]]]


@functools.cache
def qp_state_table() -> Table:
    """{(cur, nxt): (required mask per QP type, optional mask per QP type)} for every legal
    transition among RESET, INIT, RTR, RTS, SQD, SQE, ERR; a type missing from a dict needs /
    allows no attribute bit. IBV_QP_STATE is not listed (it is always allowed)."""
    ### HINT: ibv_modify_qp(3) lists the required bits of RESET->INIT->RTR->RTS; the kernel's qp_state_table adds the optional ones and the other pairs
    ### BEGIN SOLUTION
    path = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE
    ud_q = IBV_QP_CUR_STATE | IBV_QP_QKEY
    to_rts = ({}, {QPT.UD: ud_q, QPT.UC: IBV_QP_CUR_STATE | path,
                   QPT.RC: IBV_QP_CUR_STATE | path | IBV_QP_MIN_RNR_TIMER})
    init = {QPT.UD: IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
            QPT.UC: IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            QPT.RC: IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS}
    uc_rtr = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
    table: Table = {
        (QPS.RESET, QPS.RESET): ({}, {}),
        (QPS.RESET, QPS.INIT): (init, {}),
        (QPS.INIT, QPS.INIT): ({}, init),
        (QPS.INIT, QPS.RTR): (
            {QPT.UC: uc_rtr,
             QPT.RC: uc_rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER},
            {QPT.UD: IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
             QPT.UC: IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
             QPT.RC: IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX}),
        (QPS.RTR, QPS.RTS): (
            {QPT.UD: IBV_QP_SQ_PSN, QPT.UC: IBV_QP_SQ_PSN,
             QPT.RC: IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT
             | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC}, to_rts[1]),
        (QPS.RTS, QPS.RTS): to_rts,
        (QPS.RTS, QPS.SQD): ({}, {t: IBV_QP_EN_SQD_ASYNC_NOTIFY for t in QPT}),
        (QPS.SQD, QPS.RTS): to_rts,
        (QPS.SQD, QPS.SQD): (
            {}, {QPT.UD: IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
                 QPT.UC: IBV_QP_AV | path | IBV_QP_PKEY_INDEX,
                 QPT.RC: IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT
                 | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC
                 | path | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER}),
        (QPS.SQE, QPS.RTS): ({}, {QPT.UD: ud_q, QPT.UC: IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS}),
    }
    for s in (QPS.INIT, QPS.RTR, QPS.RTS, QPS.SQD, QPS.SQE, QPS.ERR):
        table[(s, QPS.RESET)] = ({}, {})
        table[(s, QPS.ERR)] = ({}, {})
    return table
    ### END SOLUTION


def modify_qp_is_ok(cur: QPS, nxt: QPS, qp_type: QPT, mask: int) -> bool:
    """True when moving a `qp_type` QP from `cur` to `nxt` with attribute mask `mask` is legal:
    the pair is in qp_state_table(), every required bit is set, no bit outside
    required | optional | IBV_QP_STATE is set, and IBV_QP_CUR_STATE only from RTR, RTS, SQD, SQE."""
    ### BEGIN SOLUTION
    if mask & IBV_QP_CUR_STATE and cur not in (QPS.RTR, QPS.RTS, QPS.SQD, QPS.SQE):
        return False
    entry = qp_state_table().get((cur, nxt))
    if entry is None:
        return False
    req, opt = entry[0].get(qp_type, 0), entry[1].get(qp_type, 0)
    if mask & req != req:
        return False
    return not mask & ~(req | opt | IBV_QP_STATE)
    ### END SOLUTION


class QP:
    """One queue pair on `node`, connected (RC/UC) to `peer_node` once in RTR. `cq` collects the
    work completions of its send queue, in the order the HCA would write them."""

    def __init__(self, node: Node, peer_node: Node, qp_type: QPT = QPT.RC) -> None:
        self.node, self.peer, self.qp_type = node, peer_node, qp_type
        self.state = QPS.RESET
        self.attrs: dict[str, int] = {}
        self.cq: list[WC] = []
        self.outstanding: list[tuple[SendWR, WCStatus]] = []  # posted, not yet completed, post order
        self.broken = False  # the responder rejected a WR: nothing after it is executed

    def modify_qp(self, attr: QPAttr, mask: int) -> None:
        """ibv_modify_qp: all or nothing; EINVAL for an illegal transition or mask."""
        cur = attr.cur_qp_state if mask & IBV_QP_CUR_STATE and attr.cur_qp_state is not None \
            else self.state
        if cur != self.state:
            raise VerbsError("EINVAL", f"cur_qp_state {cur.name} is not {self.state.name}")
        nxt = attr.qp_state if mask & IBV_QP_STATE else self.state
        if not modify_qp_is_ok(cur, nxt, self.qp_type, mask):
            raise VerbsError("EINVAL", f"{self.qp_type.name} {cur.name}->{nxt.name} mask {mask:#x}")
        self.attrs.update(attr.values)
        self.state = nxt
        if nxt == QPS.ERR:
            self._flush()
        elif nxt == QPS.RESET:  # RESET empties the queues without completions
            self.outstanding.clear()
            self.broken = False

    def post_send(self, wr: SendWR) -> None:
        """ibv_post_send of one WR (see the module docstring and README for the rules)."""
        if wr.opcode == Opcode.RDMA_READ and self.qp_type != QPT.RC or self.qp_type == QPT.UD:
            raise VerbsError("EINVAL", f"{wr.opcode.name} is not supported on {self.qp_type.name}")
        if self.state == QPS.ERR:  # accepted, and completed right away as flushed
            self.cq.append(WC(wr.wr_id, WCStatus.WR_FLUSH_ERR, None))
            return
        if self.state != QPS.RTS:
            raise VerbsError("EINVAL", f"post_send in {self.state.name}")
        ### BEGIN SOLUTION
        status = WCStatus.WR_FLUSH_ERR if self.broken else self._execute(wr)
        self.broken = self.broken or status != WCStatus.SUCCESS
        ### END SOLUTION
        self.outstanding.append((wr, status))

    def _execute(self, wr: SendWR) -> WCStatus:
        """Check the local SGE (lkey) and the remote range (rkey) and move the bytes; returns
        SUCCESS, LOC_PROT_ERR (local key, range or permission) or REM_ACCESS_ERR (remote)."""
        ### HINT: a range [addr, addr + length) must lie inside [mr.addr, mr.addr + mr.length)
        ### BEGIN SOLUTION
        local = self.node.by_lkey.get(wr.lkey)
        if local is None or not _inside(local, wr.local_addr, wr.length):
            return WCStatus.LOC_PROT_ERR
        if wr.opcode == Opcode.RDMA_READ and not local.access & IBV_ACCESS_LOCAL_WRITE:
            return WCStatus.LOC_PROT_ERR  # the READ response is written into this buffer
        remote = self.peer.by_rkey.get(wr.rkey)
        need = IBV_ACCESS_REMOTE_WRITE if wr.opcode == Opcode.RDMA_WRITE else IBV_ACCESS_REMOTE_READ
        if remote is None or not remote.access & need or not _inside(remote, wr.remote_addr, wr.length):
            return WCStatus.REM_ACCESS_ERR
        lo, ro = wr.local_addr - local.addr, wr.remote_addr - remote.addr
        if wr.opcode == Opcode.RDMA_WRITE:
            remote.buf[ro:ro + wr.length] = local.buf[lo:lo + wr.length]
        else:
            local.buf[lo:lo + wr.length] = remote.buf[ro:ro + wr.length]
        return WCStatus.SUCCESS
        ### END SOLUTION

    def ack(self, wr_id: int) -> None:
        """The transport ACK (or READ response / NAK) for `wr_id` arrived. RC ACKs are cumulative:
        every outstanding WR up to and including `wr_id` is done. Unknown or already completed
        ids change nothing. A failed WR completes with its error, the QP moves to ERR and every
        WR behind it is flushed."""
        ### HINT: walk the outstanding WRs in post order; stop after wr_id
        ### BEGIN SOLUTION
        ids = [w.wr_id for w, _ in self.outstanding]
        if wr_id not in ids:
            return
        upto = ids.index(wr_id)
        for wr, status in self.outstanding[: upto + 1]:
            self.outstanding.pop(0)
            self.cq.append(WC(wr.wr_id, status, wr.opcode if status == WCStatus.SUCCESS else None))
            if status != WCStatus.SUCCESS:
                self.state = QPS.ERR
                self._flush()
                return
        ### END SOLUTION

    def _flush(self) -> None:
        """Complete every outstanding WR with IBV_WC_WR_FLUSH_ERR, in post order."""
        for wr, _ in self.outstanding:
            self.cq.append(WC(wr.wr_id, WCStatus.WR_FLUSH_ERR, None))
        self.outstanding.clear()


def _inside(mr: MR, addr: int, length: int) -> bool:
    """[addr, addr + length) lies inside the registered range of mr."""
    ### BEGIN SOLUTION
    return mr.addr <= addr and addr + length <= mr.addr + mr.length
    ### END SOLUTION
