/* The UDP backend's per-packet loops in C: the ICRC's CRC-32, the receive pass, the send
 * pass. The Python code in backends/udp/receive.py and backends/udp/qp.py is the reference
 * (datapath "python"); tests/test_udp_native.py holds the two equal.
 *
 *   crc32(data, value=0) -> int
 *       zlib's CRC-32 (same values): PCLMULQDQ folding where the CPU has it, else
 *       slicing-by-8 tables. implementation() says which.
 *   receive(fd, tables, *, max_datagrams=-1, gro=False) -> (datagrams, segments, listed)
 *       One recvmmsg into the staging slots of ``tables`` (with UDP_GRO a datagram holds
 *       several segments, split at the gso_size the kernel reports), then per segment, in
 *       the reference's order: runt, bad_opcode, unknown_qpn (``tables.counters``, named
 *       by COUNTERS), bad_source, bad_length, bad_icrc, bad_rkey (``tables.discards``, one
 *       row per QP, columns named by DISCARDS). The segments that pass are listed in
 *       ``tables.listed`` (one row per name in LISTED) for the key table's placement step
 *       (sdr.placement.place_batch), each with zlib's CRC-32 of its payload (the "crc"
 *       column, from the same read of the payload as the ICRC: the chunk checksums are
 *       combined from these instead of reading the chunk again; -1 with the ICRC off,
 *       when no payload is read); nothing is written anywhere else.
 *   check(tables, *, lengths, sources, gso_sizes=None) -> (segments, listed)
 *       The same pass over datagrams already in the staging slots (no socket).
 *   send(fd, region, *, peer, local, rkey, src_offsets, lengths, remote_offsets, imms,
 *        qpns, psns, gso_segments=1, max_wait_ms=SEND_WAIT_MS) -> SendResult
 *       Builds BTH/RETH/ImmDt headers and the ICRC of every packet straight from the
 *       registered region and sends them with sendmmsg, several equal-sized packets per
 *       message with UDP_SEGMENT (GSO) when gso_segments > 1, a window of
 *       SEND_WINDOW_BYTES at a time (built, then sent). Every offset and length is
 *       checked against the region before anything is sent. A full send queue is waited
 *       for at most ``max_wait_ms`` in all; then, or on an error, it returns what left
 *       (SendResult: packets, wire_bytes, error, gso_refused) instead of raising.
 *
 * ``tables`` is one object (backends/udp/native.py ReceiveTables) whose attributes, named
 * by TABLES, are read once per call: the staging ring and its slot size, the local
 * address, the ICRC switch, the QPN table, and the arrays the pass writes. The names of
 * the counters, discards and listed columns are this module's (COUNTERS, DISCARDS,
 * LISTED): the Python side checks them at import, so an order changed here fails there
 * instead of miscounting. Arrays are C-contiguous int64 (the Python side converts). The
 * GIL is released around the system calls and the per-packet loops.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "../../sdr/_crc32.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum {
    HEADER_SIZE = 32,        /* BTH 12 + RETH 16 + ImmDt 4 */
    ICRC_SIZE = 4,
    MIN_PACKET = HEADER_SIZE + ICRC_SIZE,
    OPCODE = 0x2B,           /* UC RDMA WRITE Only with Immediate */
    IP_UDP = 28,
    MAX_DATAGRAMS = 256,     /* one recvmmsg */
    MAX_UDP_PAYLOAD = 65507, /* IPv4: 65535 - 20 - 8 */
    MAX_GSO_SEGMENTS = 64,
    SEND_CHUNK = 1024,       /* messages per sendmmsg (UIO_MAXIOV) */
    /* Payload bytes a send builds (ICRCs read) before handing them to the kernel: well
     * inside a core's L2 (256 KiB and up), so the kernel's copy finds them there. */
    SEND_WINDOW_BYTES = 256 << 10,
    /* A send waits for a full send queue (EAGAIN: in poll for POLLOUT, at most RETRY_MS
     * at a time; ENOBUFS, a full device queue that poll does not report: NOBUFS_MS naps)
     * for at most SEND_WAIT_MS in all, counted from its first refusal; then it returns
     * what left, and the caller counts the rest as not sent (the reliability layer
     * repairs it like any loss). 100 ms, ten polls: a sender paced below its link never
     * fills its queue, and one whose queue stays full that long outruns its link by more
     * than the queue holds; waiting longer would stall the driver loop's receives and
     * timers with it (one thread runs both). */
    RETRY_MS = 10,
    NOBUFS_MS = 1,
    SEND_WAIT_MS = 100,
};

/* What the receive pass counts and lists, in the order of its arrays. The names are
 * exported (COUNTERS, DISCARDS, LISTED) and checked by backends/udp/native.py at import. */
enum { C_RUNT, C_BAD_OPCODE, C_UNKNOWN_QPN, N_COUNTERS };
static const char *const counter_names[N_COUNTERS] = {
    [C_RUNT] = "runt", [C_BAD_OPCODE] = "bad_opcode", [C_UNKNOWN_QPN] = "unknown_qpn",
};
enum { D_BAD_SOURCE, D_BAD_LENGTH, D_BAD_ICRC, D_BAD_RKEY, N_DISCARDS };
static const char *const discard_names[N_DISCARDS] = {
    [D_BAD_SOURCE] = "bad_source", [D_BAD_LENGTH] = "bad_length",
    [D_BAD_ICRC] = "bad_icrc", [D_BAD_RKEY] = "bad_rkey",
};
enum { L_ENDPOINT, L_OFFSET, L_LENGTH, L_VA, L_IMM, L_CRC, N_LISTED };
static const char *const listed_names[N_LISTED] = {
    [L_ENDPOINT] = "endpoint", [L_OFFSET] = "offset", [L_LENGTH] = "length",
    [L_VA] = "va", [L_IMM] = "imm", [L_CRC] = "crc",
};
/* The attributes of the receive pass's ``tables`` object (exported as TABLES). */
enum {
    T_STAGING, T_SLOT_SIZE, T_LOCAL_IP, T_LOCAL_PORT, T_VERIFY, T_QPNS, T_ORDER, T_RKEYS,
    T_OWNER, T_PEER_SOURCES, T_LISTED, T_COUNTERS, T_DISCARDS, N_TABLES
};
static const char *const table_names[N_TABLES] = {
    [T_STAGING] = "staging", [T_SLOT_SIZE] = "slot_size", [T_LOCAL_IP] = "local_ip",
    [T_LOCAL_PORT] = "local_port", [T_VERIFY] = "verify", [T_QPNS] = "qpns",
    [T_ORDER] = "order", [T_RKEYS] = "rkeys", [T_OWNER] = "owner",
    [T_PEER_SOURCES] = "peer_sources", [T_LISTED] = "listed", [T_COUNTERS] = "counters",
    [T_DISCARDS] = "discards",
};
static PyObject *table_attrs[N_TABLES]; /* the names, interned at import */
/* ------------------------------------------------------------------------------------ */

/* The ICRC's running register after the pseudo LRH, IPv4 and UDP headers of a datagram
 * of ``udp_payload`` bytes from src to dst (addresses and ports in host order); the
 * prediction of backends/udp/roce.py's IcrcPrefix. */
static uint32_t icrc_prefix(uint32_t src_ip, uint32_t src_port, uint32_t dst_ip,
                            uint32_t dst_port, uint32_t udp_payload)
{
    uint8_t b[36];
    uint32_t udp_len = 8 + udp_payload, total = 20 + udp_len;
    memset(b, 0xFF, 8);
    b[8] = 0x45; b[9] = 0xFF; b[10] = (uint8_t)(total >> 8); b[11] = (uint8_t)total;
    b[12] = 0; b[13] = 0; b[14] = 0x40; b[15] = 0; /* id 0, don't fragment */
    b[16] = 0xFF; b[17] = IPPROTO_UDP; b[18] = 0xFF; b[19] = 0xFF;
    for (int i = 0; i < 4; i++) {
        b[20 + i] = (uint8_t)(src_ip >> (24 - 8 * i));
        b[24 + i] = (uint8_t)(dst_ip >> (24 - 8 * i));
    }
    b[28] = (uint8_t)(src_port >> 8); b[29] = (uint8_t)src_port;
    b[30] = (uint8_t)(dst_port >> 8); b[31] = (uint8_t)dst_port;
    b[32] = (uint8_t)(udp_len >> 8); b[33] = (uint8_t)udp_len;
    b[34] = 0xFF; b[35] = 0xFF;
    return crc_raw_table(0xFFFFFFFFu, b, sizeof b);
}

static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }
static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------------------------ */
/* Buffers                                                                              */

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static void release(Buf *b, int n)
{
    for (int i = 0; i < n; i++)
        if (b[i].held) {
            PyBuffer_Release(&b[i].view);
            b[i].held = 0;
        }
}

/* ``obj`` as a C-contiguous int64 array of ``ndim`` dimensions. */
static int get_i64_nd(PyObject *obj, const char *name, Buf *b, int writable, int ndim)
{
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a%s C-contiguous int64 array, got %.80s",
                     name, writable ? " writable" : "", Py_TYPE(obj)->tp_name);
        return -1;
    }
    b->held = 1;
    const char *f = b->view.format ? b->view.format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (b->view.ndim != ndim || b->view.itemsize != 8 || !(f[0] == 'q' || f[0] == 'l') || f[1]) {
        PyErr_Format(PyExc_TypeError, "%s must be a %d-D int64 array, got %d-D format %s",
                     name, ndim, b->view.ndim, b->view.format ? b->view.format : "B");
        return -1;
    }
    return 0;
}

/* ``obj`` as a 1-D C-contiguous int64 column of at least ``min_len`` values. */
static int get_i64(PyObject *obj, const char *name, Buf *b, int writable, Py_ssize_t min_len)
{
    if (get_i64_nd(obj, name, b, writable, 1) < 0)
        return -1;
    if (b->view.shape[0] < min_len) {
        PyErr_Format(PyExc_ValueError, "%s has %zd values, needs at least %zd", name,
                     b->view.shape[0], min_len);
        return -1;
    }
    return 0;
}

/* ``obj`` as a writable 2-D C-contiguous int64 table: ``rows`` rows of at least
 * ``min_cols`` values when ``rows`` > 0, else at least ``min_rows`` rows of ``cols``. */
static int get_i64_table(PyObject *obj, const char *name, Buf *b, Py_ssize_t rows,
                         Py_ssize_t min_cols, Py_ssize_t min_rows, Py_ssize_t cols)
{
    if (get_i64_nd(obj, name, b, 1, 2) < 0)
        return -1;
    Py_ssize_t r = b->view.shape[0], c = b->view.shape[1];
    if (rows > 0 ? r != rows || c < min_cols : r < min_rows || c != cols) {
        if (rows > 0)
            PyErr_Format(PyExc_ValueError, "%s is %zd x %zd, needs %zd x at least %zd", name,
                         r, c, rows, min_cols);
        else
            PyErr_Format(PyExc_ValueError, "%s is %zd x %zd, needs at least %zd x %zd", name,
                         r, c, min_rows, cols);
        return -1;
    }
    return 0;
}

static int get_bytes(PyObject *obj, const char *name, Buf *b, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a%s contiguous byte buffer, got %.80s", name,
                     writable ? " writable" : "", Py_TYPE(obj)->tp_name);
        return -1;
    }
    b->held = 1;
    return 0;
}

#define I64(b) ((int64_t *)(b).view.buf)
#define LEN(b) ((b).view.shape ? (b).view.shape[0] : (b).view.len / 8)

/* An unsigned integer argument no larger than ``max`` (addresses, ports, keys). */
static int get_uint(PyObject *obj, const char *name, unsigned long max, unsigned long *out)
{
    unsigned long v = PyLong_Check(obj) ? PyLong_AsUnsignedLong(obj) : (unsigned long)-1;
    if ((v == (unsigned long)-1 && PyErr_Occurred()) || !PyLong_Check(obj) || v > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an integer in 0..%lu", name, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* A required keyword-only argument (PyArg_ParseTupleAndKeywords makes them optional). */
static int required(PyObject *obj, const char *func, const char *name)
{
    if (obj != NULL)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() missing required keyword argument '%s'", func, name);
    return -1;
}

/* ``obj`` as an (ip, port) pair of an IPv4 address in host order and a port. */
static int get_address(PyObject *obj, const char *name, uint32_t *ip, uint32_t *port)
{
    unsigned long a, p;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
        PyErr_Format(PyExc_TypeError, "%s must be an (ip, port) tuple of integers", name);
        return -1;
    }
    if (get_uint(PyTuple_GET_ITEM(obj, 0), name, 0xFFFFFFFFul, &a) < 0 ||
        get_uint(PyTuple_GET_ITEM(obj, 1), name, 0xFFFFul, &p) < 0)
        return -1;
    *ip = (uint32_t)a;
    *port = (uint32_t)p;
    return 0;
}
/* ------------------------------------------------------------------------------------ */
/* crc32(data, value=0)                                                                 */

static PyObject *py_crc32(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned long value = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*|k:crc32", &view, &value))
        return NULL;
    uint32_t c = ~(uint32_t)value;
    const uint8_t *p = view.buf;
    size_t n = (size_t)view.len;
    if (n > 65536) {
        Py_BEGIN_ALLOW_THREADS
        c = crc_raw(c, p, n);
        Py_END_ALLOW_THREADS
    } else {
        c = crc_raw(c, p, n);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(~c);
}

static PyObject *py_implementation(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return PyUnicode_FromString(crc32_implementation());
}

/* ------------------------------------------------------------------------------------ */
/* receive                                                                              */

typedef struct {
    const uint8_t *staging;
    Py_ssize_t slot_size;
    const int64_t *qpns, *order, *rkeys, *owner, *peer_sources;
    Py_ssize_t n_qpns, n_eps, n_owners;
    int64_t *listed[N_LISTED];
    Py_ssize_t listed_cap;
    int64_t *counters, *discards;
    uint32_t local_ip, local_port;
    int verify;
    /* the last ICRC prefix: most segments come from one peer at one size */
    int64_t last_source;
    uint32_t last_len, last_state;
    /* x^(8 * last_dlen): moves the header's register across a payload of that size */
    int64_t last_dlen;
    uint32_t last_shift;
} RecvPass;

static Py_ssize_t find_qpn(const RecvPass *r, int64_t qpn)
{
    Py_ssize_t lo = 0, hi = r->n_qpns;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (r->qpns[mid] < qpn)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_qpns && r->qpns[lo] == qpn ? lo : -1;
}

/* One segment of ``len`` bytes at staging offset ``off`` from ``source``; returns 1 if it
 * was listed for placement. */
static int recv_segment(RecvPass *r, Py_ssize_t *k, Py_ssize_t off, uint32_t len, int64_t source)
{
    const uint8_t *p = r->staging + off;
    if (len < MIN_PACKET) {
        r->counters[C_RUNT]++;
        return 0;
    }
    if (p[0] != OPCODE) {
        r->counters[C_BAD_OPCODE]++;
        return 0;
    }
    Py_ssize_t pos = find_qpn(r, be32(p + 4) & 0xFFFFFF);
    int64_t ep = pos < 0 ? -1 : r->order[pos];
    int64_t own = ep < 0 || ep >= r->n_eps ? -1 : r->owner[ep];
    if (own < 0 || own >= r->n_owners) {
        r->counters[C_UNKNOWN_QPN]++;
        return 0;
    }
    int64_t *disc = r->discards + own * N_DISCARDS;
    if (source != r->peer_sources[own]) {
        disc[D_BAD_SOURCE]++;
        return 0;
    }
    int64_t dlen = be32(p + 24), pad = (p[1] >> 4) & 3, end = (int64_t)len - ICRC_SIZE;
    if (HEADER_SIZE + dlen + pad != end || pad != (-dlen & 3)) {
        disc[D_BAD_LENGTH]++;
        return 0;
    }
    /* with the ICRC on, the payload is read once for two checksums: its own (zlib's
     * CRC-32, listed: the chunk checksums are combined from these) and the ICRC. With
     * it off the pass reads no payload and lists -1 (not known). */
    int64_t listed_crc = -1;
    if (r->verify) {
        uint32_t payload = crc_raw(0xFFFFFFFFu, p + HEADER_SIZE, (size_t)dlen);
        if (source != r->last_source || len != r->last_len) {
            r->last_source = source;
            r->last_len = len;
            r->last_state = icrc_prefix((uint32_t)(source >> 16), (uint32_t)(source & 0xFFFF),
                                        r->local_ip, r->local_port, len);
        }
        if (dlen != r->last_dlen) {
            r->last_dlen = dlen;
            r->last_shift = crc_x8n((uint64_t)dlen);
        }
        uint8_t hdr[HEADER_SIZE];
        memcpy(hdr, p, HEADER_SIZE);
        hdr[4] = 0xFF; /* the ICRC sees F|B|resv6 as all ones */
        uint32_t c = crc_raw_table(r->last_state, hdr, HEADER_SIZE);
        /* crc_raw(c, payload) = shift(c ^ ~0, dlen) ^ crc_raw(~0, payload) */
        c = crc_mul(c ^ 0xFFFFFFFFu, r->last_shift) ^ payload;
        c = ~crc_raw_table(c, p + HEADER_SIZE + dlen, (size_t)pad);
        uint32_t carried = (uint32_t)p[end] | (uint32_t)p[end + 1] << 8 |
                           (uint32_t)p[end + 2] << 16 | (uint32_t)p[end + 3] << 24;
        if (c != carried) {
            disc[D_BAD_ICRC]++;
            return 0;
        }
        listed_crc = ~payload;
    }
    if ((int64_t)be32(p + 20) != r->rkeys[ep]) {
        disc[D_BAD_RKEY]++;
        return 0;
    }
    Py_ssize_t i = (*k)++;
    r->listed[L_ENDPOINT][i] = ep;
    r->listed[L_OFFSET][i] = off + HEADER_SIZE;
    r->listed[L_LENGTH][i] = dlen;
    r->listed[L_VA][i] = (int64_t)be64(p + 12); /* > 2^63 wraps negative: out of range */
    r->listed[L_IMM][i] = be32(p + 28);
    r->listed[L_CRC][i] = listed_crc;
    return 1;
}

/* One datagram of ``total`` bytes in the slot at ``slot_off``: a runt when truncated, else
 * split into segments of ``gso`` bytes (the last may be shorter), each checked. */
static void check_datagram(RecvPass *r, Py_ssize_t *k, Py_ssize_t *segments, Py_ssize_t slot_off,
                           Py_ssize_t slot_size, uint32_t total, int truncated, int64_t source,
                           uint32_t gso)
{
    if (truncated || total == 0 || total > (uint32_t)slot_size) {
        r->counters[C_RUNT]++;
        (*segments)++;
        return;
    }
    if (gso == 0 || gso > total)
        gso = total;
    for (uint32_t at = 0; at < total; at += gso) {
        uint32_t len = total - at < gso ? total - at : gso;
        (*segments)++;
        if (*k < r->listed_cap)
            recv_segment(r, k, slot_off + at, len, source);
        else
            r->counters[C_RUNT]++; /* cannot happen: listed_cap covers minimal segments */
    }
}

/* The buffers of one pass, in ``Buf b[]``. */
enum {
    B_STAGING, B_QPNS, B_ORDER, B_RKEYS, B_OWNER, B_PEER_SOURCES, B_LISTED, B_COUNTERS,
    B_DISCARDS, N_PASS_BUFS,
    B_LENGTHS = N_PASS_BUFS, B_SOURCES, B_GSO, N_CHECK_BUFS
};

/* The pass over ``*slots`` staging slots (-1: as many as the staging holds, at most
 * ``limit``) from ``tables``, every attribute named by TABLES: each array is checked
 * against the most the pass can write before anything is written. */
static int setup_pass(RecvPass *r, Buf *b, PyObject *tables, Py_ssize_t *slots,
                      Py_ssize_t limit, int gro)
{
    PyObject *o[N_TABLES] = {NULL};
    unsigned long local_ip, local_port;
    int rc = -1;
    for (int i = 0; i < N_TABLES; i++) {
        o[i] = PyObject_GetAttr(tables, table_attrs[i]);
        if (o[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "tables (%.80s) has no attribute '%s' (TABLES)",
                         Py_TYPE(tables)->tp_name, table_names[i]);
            goto out;
        }
    }
    Py_ssize_t slot_size = PyLong_Check(o[T_SLOT_SIZE]) ? PyLong_AsSsize_t(o[T_SLOT_SIZE]) : -1;
    if (slot_size == -1 && PyErr_Occurred())
        goto out;
    if (get_uint(o[T_LOCAL_IP], "local_ip", 0xFFFFFFFFul, &local_ip) < 0 ||
        get_uint(o[T_LOCAL_PORT], "local_port", 0xFFFFul, &local_port) < 0)
        goto out;
    int verify = PyObject_IsTrue(o[T_VERIFY]);
    if (verify < 0 || get_bytes(o[T_STAGING], "staging", &b[B_STAGING], 1) < 0)
        goto out;
    int sized = slot_size >= MIN_PACKET && slot_size <= (1 << 20);
    Py_ssize_t held = sized ? b[B_STAGING].view.len / slot_size : 0;
    if (*slots < 0)
        *slots = held < limit ? held : limit;
    if (!sized || *slots > held) {
        PyErr_Format(PyExc_ValueError,
                     "staging of %zd bytes does not hold %zd slots of %zd bytes (%d..%d)",
                     b[B_STAGING].view.len, *slots, slot_size, MIN_PACKET, 1 << 20);
        goto out;
    }
    if (get_i64(o[T_QPNS], "qpns", &b[B_QPNS], 0, 0) < 0 ||
        get_i64(o[T_ORDER], "order", &b[B_ORDER], 0, LEN(b[B_QPNS])) < 0 ||
        get_i64(o[T_RKEYS], "rkeys", &b[B_RKEYS], 0, 0) < 0 ||
        get_i64(o[T_OWNER], "owner", &b[B_OWNER], 0, LEN(b[B_RKEYS])) < 0 ||
        get_i64(o[T_PEER_SOURCES], "peer_sources", &b[B_PEER_SOURCES], 0, 0) < 0)
        goto out;
    /* the most segments one call can list: every slot split into minimal segments */
    Py_ssize_t cap = *slots * (gro ? slot_size / MIN_PACKET + 1 : 1);
    Py_ssize_t n_owners = LEN(b[B_PEER_SOURCES]);
    if (get_i64_table(o[T_LISTED], "listed", &b[B_LISTED], N_LISTED, cap, 0, 0) < 0 ||
        get_i64(o[T_COUNTERS], "counters", &b[B_COUNTERS], 1, N_COUNTERS) < 0 ||
        get_i64_table(o[T_DISCARDS], "discards", &b[B_DISCARDS], 0, 0, n_owners, N_DISCARDS) < 0)
        goto out;
    *r = (RecvPass){
        .staging = b[B_STAGING].view.buf, .slot_size = slot_size,
        .qpns = I64(b[B_QPNS]), .order = I64(b[B_ORDER]), .rkeys = I64(b[B_RKEYS]),
        .owner = I64(b[B_OWNER]), .peer_sources = I64(b[B_PEER_SOURCES]),
        .n_qpns = LEN(b[B_QPNS]), .n_eps = LEN(b[B_RKEYS]), .n_owners = n_owners,
        .listed_cap = cap,
        .counters = I64(b[B_COUNTERS]), .discards = I64(b[B_DISCARDS]),
        .local_ip = (uint32_t)local_ip, .local_port = (uint32_t)local_port, .verify = verify,
        .last_source = -2, .last_dlen = -1,
    };
    Py_ssize_t stride = b[B_LISTED].view.shape[1];
    for (int i = 0; i < N_LISTED; i++)
        r->listed[i] = I64(b[B_LISTED]) + i * stride;
    rc = 0;
out:
    for (int i = 0; i < N_TABLES; i++)
        Py_XDECREF(o[i]); /* a held buffer keeps its own reference */
    return rc;
}

static PyObject *py_receive(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fd", "tables", "max_datagrams", "gro", NULL};
    (void)self;
    int fd, gro = 0;
    Py_ssize_t max_dg = -1;
    PyObject *tables;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO|$np:receive", kwlist, &fd, &tables,
                                     &max_dg, &gro))
        return NULL;
    if (max_dg == 0 || max_dg < -1) {
        PyErr_SetString(PyExc_ValueError,
                        "receive: max_datagrams must be >= 1 (or -1: what the staging holds)");
        return NULL;
    }
    if (max_dg > MAX_DATAGRAMS)
        max_dg = MAX_DATAGRAMS;
    Buf b[N_PASS_BUFS] = {{{0}}};
    PyObject *result = NULL;
    struct mmsghdr *msgs = NULL;
    RecvPass r;
    if (setup_pass(&r, b, tables, &max_dg, MAX_DATAGRAMS, gro) < 0)
        goto done;
    if (max_dg < 1) {
        PyErr_SetString(PyExc_ValueError, "receive: the staging holds no slot");
        goto done;
    }
    Py_ssize_t slot_size = r.slot_size;
    size_t cmsg_space = CMSG_SPACE(sizeof(int));
    size_t each = sizeof(struct mmsghdr) + sizeof(struct iovec) + sizeof(struct sockaddr_in) + cmsg_space;
    msgs = calloc((size_t)max_dg, each);
    if (msgs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    struct iovec *iov = (struct iovec *)(msgs + max_dg);
    struct sockaddr_in *names = (struct sockaddr_in *)(iov + max_dg);
    char *cbuf = (char *)(names + max_dg);
    uint8_t *slots = b[B_STAGING].view.buf;
    for (Py_ssize_t i = 0; i < max_dg; i++) {
        iov[i].iov_base = slots + i * slot_size;
        iov[i].iov_len = (size_t)slot_size;
        msgs[i].msg_hdr.msg_name = &names[i];
        msgs[i].msg_hdr.msg_namelen = sizeof names[i];
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        if (gro) {
            msgs[i].msg_hdr.msg_control = cbuf + i * cmsg_space;
            msgs[i].msg_hdr.msg_controllen = cmsg_space;
        }
    }
    int got, err = 0;
    Py_ssize_t segments = 0, k = 0;
    Py_BEGIN_ALLOW_THREADS
    got = recvmmsg(fd, msgs, (unsigned)max_dg, MSG_DONTWAIT, NULL);
    if (got < 0)
        err = errno;
    for (int i = 0; i < got; i++) {
        struct msghdr *h = &msgs[i].msg_hdr;
        int64_t source = -1;
        if (h->msg_namelen >= sizeof(struct sockaddr_in) && names[i].sin_family == AF_INET)
            source = (int64_t)ntohl(names[i].sin_addr.s_addr) << 16 | ntohs(names[i].sin_port);
        uint32_t gso = 0;
        if (gro) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
                if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
                    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
                    int size;
                    memcpy(&size, CMSG_DATA(c), sizeof size);
                    if (size > 0)
                        gso = (uint32_t)size;
                }
            }
        }
        check_datagram(&r, &k, &segments, i * slot_size, slot_size, msgs[i].msg_len,
                       (h->msg_flags & MSG_TRUNC) != 0, source, gso);
    }
    Py_END_ALLOW_THREADS
    if (got < 0) {
        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
            got = 0;
        else {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
    }
    result = Py_BuildValue("(inn)", got, segments, k);
done:
    free(msgs);
    release(b, N_PASS_BUFS);
    return result;
}

/* check(tables, *, lengths, sources, gso_sizes=None) -> (segments, listed): the receive
 * pass over datagrams already in the staging slots (tests and fuzzing feed it without a
 * socket; a length of -1 marks a truncated datagram, a gso size of 0 a datagram of one
 * packet; None: every datagram is one packet). */
static PyObject *py_check(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"tables", "lengths", "sources", "gso_sizes", NULL};
    (void)self;
    PyObject *tables, *o_lengths = NULL, *o_sources = NULL, *o_gso = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$OOO:check", kwlist, &tables,
                                     &o_lengths, &o_sources, &o_gso))
        return NULL;
    if (required(o_lengths, "check", "lengths") < 0 || required(o_sources, "check", "sources") < 0)
        return NULL;
    Buf b[N_CHECK_BUFS] = {{{0}}};
    PyObject *result = NULL;
    RecvPass r;
    int gro = o_gso != Py_None;
    if (get_i64(o_lengths, "lengths", &b[B_LENGTHS], 0, 0) < 0)
        goto done;
    Py_ssize_t n = LEN(b[B_LENGTHS]);
    if (get_i64(o_sources, "sources", &b[B_SOURCES], 0, n) < 0 ||
        (gro && get_i64(o_gso, "gso_sizes", &b[B_GSO], 0, n) < 0))
        goto done;
    if (setup_pass(&r, b, tables, &n, PY_SSIZE_T_MAX, gro) < 0)
        goto done;
    const int64_t *lengths = I64(b[B_LENGTHS]), *sources = I64(b[B_SOURCES]);
    const int64_t *gso = gro ? I64(b[B_GSO]) : NULL;
    Py_ssize_t slot_size = r.slot_size, segments = 0, k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t len = lengths[i], g = gso ? gso[i] : 0;
        int truncated = len < 0 || len > slot_size;
        check_datagram(&r, &k, &segments, i * slot_size, slot_size,
                       truncated ? 0 : (uint32_t)len, truncated, sources[i],
                       g <= 0 || g > len ? 0 : (uint32_t)g);
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(nn)", segments, k);
done:
    release(b, N_CHECK_BUFS);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* send                                                                                 */

/* What one send did: the named record a caller counts from (quinn-udp's ``Transmit``
 * names what goes; this names what went). */
static PyStructSequence_Field send_result_fields[] = {
    {"packets", "packets the kernel took, the first ones of the batch (a prefix)"},
    {"wire_bytes", "their IP bytes (IP and UDP headers included)"},
    {"error", "0 when every packet left; else the errno that stopped the send: EAGAIN or "
              "ENOBUFS when the send queue stayed full for max_wait_ms, or the kernel's error"},
    {"gso_refused", "1 when the kernel refused UDP_SEGMENT (EIO or EINVAL) and the rest went "
                    "one datagram per message: the caller turns GSO off for the socket"},
    {NULL, NULL},
};
static PyStructSequence_Desc send_result_desc = {
    "sdr.backends.udp._datapath.SendResult",
    "What one send put on the wire: (packets, wire_bytes, error, gso_refused).",
    send_result_fields, 4,
};
static PyTypeObject *SendResult;

static PyObject *send_result(Py_ssize_t packets, long long wire_bytes, int error, int gso_refused)
{
    PyObject *r = PyStructSequence_New(SendResult);
    if (r == NULL)
        return NULL;
    PyObject *v[4] = {PyLong_FromSsize_t(packets), PyLong_FromLongLong(wire_bytes),
                      PyLong_FromLong(error), PyLong_FromLong(gso_refused)};
    int ok = 1;
    for (int f = 0; f < 4; f++) {
        ok &= v[f] != NULL;
        PyStructSequence_SetItem(r, f, v[f]); /* steals; NULL leaves the slot empty */
    }
    if (!ok)
        Py_CLEAR(r);
    return r;
}

static double elapsed_ms(const struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - since->tv_sec) * 1e3 + (double)(now.tv_nsec - since->tv_nsec) / 1e6;
}

/* The messages from ``from_msg`` on, rebuilt one packet each without UDP_SEGMENT (the
 * kernel refused GSO); returns the new number of messages (at most the packet count, so
 * the arrays sized for one message per packet hold them). */
static Py_ssize_t ungroup(struct mmsghdr *msgs, struct iovec *iov, Py_ssize_t *group_end,
                          Py_ssize_t from_msg, Py_ssize_t n, struct sockaddr_in *peer)
{
    Py_ssize_t g = from_msg;
    for (Py_ssize_t p = from_msg ? group_end[from_msg - 1] : 0; p < n; p++, g++) {
        memset(&msgs[g], 0, sizeof msgs[g]);
        struct msghdr *m = &msgs[g].msg_hdr;
        m->msg_name = peer;
        m->msg_namelen = sizeof *peer;
        m->msg_iov = iov + 3 * p;
        m->msg_iovlen = 3;
        group_end[g] = p + 1;
    }
    return g;
}

static PyObject *py_send(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fd", "region", "peer", "local", "rkey", "src_offsets", "lengths",
                             "remote_offsets", "imms", "qpns", "psns", "gso_segments",
                             "max_wait_ms", NULL};
    (void)self;
    int fd;
    Py_ssize_t gso_max = 1, wait_ms = SEND_WAIT_MS;
    PyObject *o_region, *o_peer = NULL, *o_local = NULL, *o_rkey = NULL;
    PyObject *col[6] = {NULL};
    static const char *col_names[6] = {"src_offsets", "lengths", "remote_offsets", "imms",
                                       "qpns", "psns"};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO|$OOOOOOOOOnn:send", kwlist, &fd,
                                     &o_region, &o_peer, &o_local, &o_rkey, &col[0], &col[1],
                                     &col[2], &col[3], &col[4], &col[5], &gso_max, &wait_ms))
        return NULL;
    uint32_t peer_ip, peer_port, local_ip, local_port;
    unsigned long rkey;
    if (required(o_peer, "send", "peer") < 0 || required(o_local, "send", "local") < 0 ||
        required(o_rkey, "send", "rkey") < 0)
        return NULL;
    for (int c = 0; c < 6; c++)
        if (required(col[c], "send", col_names[c]) < 0)
            return NULL;
    if (get_address(o_peer, "peer", &peer_ip, &peer_port) < 0 ||
        get_address(o_local, "local", &local_ip, &local_port) < 0 ||
        get_uint(o_rkey, "rkey", 0xFFFFFFFFul, &rkey) < 0)
        return NULL;
    if (wait_ms < 0) {
        PyErr_SetString(PyExc_ValueError, "send: max_wait_ms must be >= 0");
        return NULL;
    }
    Buf b[7] = {{{0}}};
    PyObject *result = NULL;
    char *mem = NULL;
    if (get_bytes(o_region, "region", &b[0], 0) < 0 || get_i64(col[0], col_names[0], &b[1], 0, 0) < 0)
        goto done;
    Py_ssize_t n = LEN(b[1]);
    for (int c = 1; c < 6; c++)
        if (get_i64(col[c], col_names[c], &b[c + 1], 0, n) < 0)
            goto done;
    if (gso_max < 1)
        gso_max = 1;
    if (gso_max > MAX_GSO_SEGMENTS)
        gso_max = MAX_GSO_SEGMENTS;
    const int64_t *src = I64(b[1]), *len = I64(b[2]), *va = I64(b[3]), *imm = I64(b[4]);
    const int64_t *qpn = I64(b[5]), *psn = I64(b[6]);
    const Py_ssize_t region_len = b[0].view.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (len[i] < 0 || src[i] < 0 || len[i] > MAX_UDP_PAYLOAD - MIN_PACKET - 3 ||
            src[i] > region_len - len[i]) {
            PyErr_Format(PyExc_ValueError,
                         "send: packet %zd (offset %lld, length %lld) is outside the region "
                         "of %zd bytes or longer than a datagram", i, (long long)src[i],
                         (long long)len[i], region_len);
            goto done;
        }
    }
    if (n == 0) {
        result = send_result(0, 0, 0, 0);
        goto done;
    }
    /* per packet: its header, tail, iovecs, running wire bytes; per message (at most one
     * per packet): the mmsghdr, its control block, the packet count it ends at */
    size_t cmsg_space = CMSG_SPACE(sizeof(uint16_t));
    size_t per = HEADER_SIZE + 8 + 3 * sizeof(struct iovec) + sizeof(int64_t) +
                 sizeof(struct mmsghdr) + cmsg_space + sizeof(Py_ssize_t);
    mem = calloc((size_t)n, per);
    if (mem == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *headers = (uint8_t *)mem;
    uint8_t *tails = headers + n * HEADER_SIZE;
    struct iovec *iov = (struct iovec *)(tails + n * 8);
    int64_t *wire_through = (int64_t *)(iov + 3 * n); /* IP bytes of packets 0..j */
    struct mmsghdr *msgs = (struct mmsghdr *)(wire_through + n);
    Py_ssize_t *group_end = (Py_ssize_t *)(msgs + n);
    char *cbuf = (char *)(group_end + n);
    struct sockaddr_in peer = {0};
    peer.sin_family = AF_INET;
    peer.sin_port = htons((uint16_t)peer_port);
    peer.sin_addr.s_addr = htonl(peer_ip);
    const uint8_t *region = b[0].view.buf;
    int err = 0, gso_refused = 0;
    Py_ssize_t done_msgs = 0;
    Py_BEGIN_ALLOW_THREADS
    uint32_t last_size = 0, state = 0;
    int64_t wire = 0;
    Py_ssize_t groups = 0, built = 0; /* messages built; packets built (their end) */
    struct timespec first_refusal = {0};
    int refused = 0;
    while (built < n) {
        /* Build a window of messages (headers and ICRCs), then send it before building
         * the next: the ICRC's read leaves each payload in the cache for the kernel's
         * copy, which a whole batch of large packets would have evicted by then. */
        size_t window = 0;
        while (built < n && window < SEND_WINDOW_BYTES) {
            /* one message: packets i..j-1, all of one wire size but the last */
            Py_ssize_t i = built, j = i;
            uint32_t seg = 0, bytes = 0;
            while (j < n && j - i < gso_max) {
                uint32_t pad = (uint32_t)(-len[j] & 3);
                uint32_t size = HEADER_SIZE + (uint32_t)len[j] + pad + ICRC_SIZE;
                if (j > i && (size > seg || bytes + size > MAX_UDP_PAYLOAD))
                    break;
                uint8_t *h = headers + j * HEADER_SIZE, *t = tails + j * 8;
                h[0] = OPCODE;
                h[1] = (uint8_t)(pad << 4);
                h[2] = 0xFF; h[3] = 0xFF; /* P_Key */
                put_be32(h + 4, (uint32_t)qpn[j] & 0xFFFFFF);
                put_be32(h + 8, (uint32_t)psn[j] & 0xFFFFFF);
                put_be32(h + 12, (uint32_t)((uint64_t)va[j] >> 32));
                put_be32(h + 16, (uint32_t)(uint64_t)va[j]);
                put_be32(h + 20, (uint32_t)rkey);
                put_be32(h + 24, (uint32_t)len[j]);
                put_be32(h + 28, (uint32_t)imm[j]);
                if (size != last_size) {
                    last_size = size;
                    state = icrc_prefix(local_ip, local_port, peer_ip, peer_port, size);
                }
                h[4] = 0xFF; /* the ICRC sees F|B|resv6 as all ones; the wire carries zeros */
                uint32_t c = crc_raw_table(state, h, HEADER_SIZE);
                h[4] = 0;
                c = crc_raw(c, region + src[j], (size_t)len[j]);
                memset(t, 0, 8);
                c = ~crc_raw_table(c, t, pad);
                put_le32(t + pad, c);
                struct iovec *v = iov + 3 * j;
                v[0].iov_base = h; v[0].iov_len = HEADER_SIZE;
                v[1].iov_base = (void *)(region + src[j]); v[1].iov_len = (size_t)len[j];
                v[2].iov_base = t; v[2].iov_len = pad + ICRC_SIZE;
                wire += size + IP_UDP;
                wire_through[j] = wire;
                bytes += size;
                if (j == i)
                    seg = size;
                j++;
                if (size < seg)
                    break; /* a shorter packet ends a GSO message */
            }
            struct msghdr *m = &msgs[groups].msg_hdr;
            m->msg_name = &peer;
            m->msg_namelen = sizeof peer;
            m->msg_iov = iov + 3 * i;
            m->msg_iovlen = (size_t)(3 * (j - i));
            if (j - i > 1) {
                char *cb = cbuf + groups * cmsg_space;
                m->msg_control = cb;
                m->msg_controllen = cmsg_space;
                struct cmsghdr *c = CMSG_FIRSTHDR(m);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                uint16_t s16 = (uint16_t)seg;
                memcpy(CMSG_DATA(c), &s16, sizeof s16);
            }
            group_end[groups++] = j;
            window += bytes;
            built = j;
        }
        while (done_msgs < groups) {
            Py_ssize_t chunk = groups - done_msgs > SEND_CHUNK ? SEND_CHUNK : groups - done_msgs;
            int sent = sendmmsg(fd, msgs + done_msgs, (unsigned)chunk, 0);
            if (sent > 0) {
                done_msgs += sent;
                continue;
            }
            int e = sent < 0 ? errno : EIO;
            if ((e == EIO || e == EINVAL) && msgs[done_msgs].msg_hdr.msg_controllen > 0) {
                /* the kernel (or the device) refuses GSO on this socket, e.g. EINVAL
                 * without UDP checksums, EIO without checksum offload: the rest goes
                 * without it */
                groups = ungroup(msgs, iov, group_end, done_msgs, built, &peer);
                gso_refused = 1;
                gso_max = 1;
                continue;
            }
            if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == EINTR) {
                if (!refused) {
                    refused = 1;
                    clock_gettime(CLOCK_MONOTONIC, &first_refusal);
                }
                double left = (double)wait_ms - elapsed_ms(&first_refusal);
                if (left <= 0) {
                    err = e; /* the queue stayed full: the caller learns what left */
                    break;
                }
                int nap = left < RETRY_MS ? (int)left + 1 : RETRY_MS;
                if (e == EAGAIN || e == EWOULDBLOCK) {
                    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                    poll(&pfd, 1, nap); /* the send queue is full: let it drain */
                } else if (e == ENOBUFS) {
                    poll(NULL, 0, nap < NOBUFS_MS ? nap : NOBUFS_MS); /* poll would not wait */
                }
                continue;
            }
            err = e;
            break;
        }
        if (err)
            break;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t packets = done_msgs ? group_end[done_msgs - 1] : 0;
    long long sent_bytes = packets ? (long long)wire_through[packets - 1] : 0;
    result = send_result(packets, sent_bytes, err, gso_refused);
done:
    free(mem);
    release(b, 7);
    return result;
}

/* ------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"crc32", py_crc32, METH_VARARGS,
     "crc32(data, value=0)\n--\n\nzlib's CRC-32 of data, continuing from value."},
    {"implementation", py_implementation, METH_NOARGS,
     "implementation()\n--\n\n'vpclmul' (AVX-512 carry-less multiply folding), 'pclmul' (SSE), or 'table'\n(slicing-by-8)."},
    {"receive", (PyCFunction)(void (*)(void))py_receive, METH_VARARGS | METH_KEYWORDS,
     "receive(fd, tables, *, max_datagrams=-1, gro=False)\n--\n\n"
     "Receive and check one batch of datagrams into tables (see backends/udp/native.py);\n"
     "returns (datagrams, segments, listed)."},
    {"check", (PyCFunction)(void (*)(void))py_check, METH_VARARGS | METH_KEYWORDS,
     "check(tables, *, lengths, sources, gso_sizes=None)\n--\n\n"
     "The receive pass over datagrams already in staging; returns (segments, listed)."},
    {"send", (PyCFunction)(void (*)(void))py_send, METH_VARARGS | METH_KEYWORDS,
     "send(fd, region, *, peer, local, rkey, src_offsets, lengths, remote_offsets, imms,\n"
     "     qpns, psns, gso_segments=1, max_wait_ms=SEND_WAIT_MS)\n--\n\n"
     "Build and send one batch of packets from a region; returns a SendResult (what left)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_datapath",
    "The UDP backend's per-packet loops (ICRC, receive, send) in C.", -1, methods,
};

static PyObject *names_tuple(const char *const *names, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (s == NULL)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

/* Adds ``value`` (a new reference, NULL on error) to the module as ``name``. */
static int add(PyObject *m, const char *name, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (PyModule_AddObject(m, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__datapath(void)
{
    crc32_setup();
    for (int i = 0; i < N_TABLES; i++)
        if (table_attrs[i] == NULL && (table_attrs[i] = PyUnicode_InternFromString(table_names[i])) == NULL)
            return NULL;
    if (SendResult == NULL && (SendResult = PyStructSequence_NewType(&send_result_desc)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(SendResult);
    if (add(m, "COUNTERS", names_tuple(counter_names, N_COUNTERS)) < 0 ||
        add(m, "DISCARDS", names_tuple(discard_names, N_DISCARDS)) < 0 ||
        add(m, "LISTED", names_tuple(listed_names, N_LISTED)) < 0 ||
        add(m, "TABLES", names_tuple(table_names, N_TABLES)) < 0 ||
        add(m, "SEND_WAIT_MS", PyLong_FromLong(SEND_WAIT_MS)) < 0 ||
        add(m, "SendResult", (PyObject *)SendResult) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
