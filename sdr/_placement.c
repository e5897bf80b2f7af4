/* The software NIC's receive step in C: sdr.placement.place_batch, natively.
 *
 * Same signature, same rules, same order and same results as the Python reference
 * (sdr/placement_reference.py, place_batch_python); tests/test_placement_seam.py and
 * tests/test_placement_native.py hold the two equal.
 *
 *   place_batch(table, generations, remote_offsets, imms, lengths, payloads,
 *               payload_offsets=None) -> numpy uint8 verdicts
 *
 * Every array comes through the buffer protocol (no NumPy C API). The work runs in
 * phases so that nothing is written before every bound is known to hold:
 *
 *   1. (GIL) read the geometry, take the buffers of the table and of the columns;
 *   2. (no GIL) rules 1-7 for every packet; packets that pass and carry data become
 *      candidates, whose packet-byte and chunk-count indices are checked here;
 *   3. (GIL) resolve each candidate's destination (its region, through table.regions)
 *      and source (staging buffer or its own buffer); nothing is read or written yet;
 *   4. (no GIL) find whether a candidate whose copy would fall outside a buffer would
 *      really be placed (the reference raises then, having written its earlier rows;
 *      this one raises having written nothing); then rule 8, the copies, the packet
 *      bytes, the chunk counts and the discard counters, packet by packet in order.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_crc32.h"

/* Verdict codes, as in sdr.placement. */
enum { PLACED, LATE, OUT_OF_RANGE, STALE_GENERATION, MALFORMED, DUPLICATE, N_VERDICTS };
/* Words of a key-table entry: [seq, region, offset, length, msg_id, spare]. */
enum { E_REGION = 1, E_OFFSET = 2, E_LENGTH = 3, E_MSG_ID = 4, E_MIN_WORDS = 5 };

static PyObject *np_empty;  /* numpy.empty */
static PyObject *np_uint8;  /* numpy.uint8 */

/* --- int64 arithmetic that wraps like NumPy's (signed overflow is undefined in C) --- */

static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* Unaligned-safe loads and stores (a view of shared memory may start anywhere). */
static inline int64_t load_i64(const char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t load_u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline void store_u32(char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void store_i64(char *p, int64_t v) { memcpy(p, &v, 8); }

/* --- buffer formats --- */

/* The struct-module type character of a buffer in native byte order, 0 if it is in
 * another byte order or not a single integer type. */
static char format_code(const Py_buffer *view)
{
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=')
        f++;
#if PY_LITTLE_ENDIAN
    else if (*f == '<')
        f++;
#else
    else if (*f == '>' || *f == '!')
        f++;
#endif
    if (f[0] == 0 || f[1] != 0)
        return 0;
    return strchr("bBhHiIlLqQ", f[0]) ? f[0] : 0;
}

static int is_signed(char code) { return code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q'; }

/* --- the batch's columns: 1-D, C-contiguous, any integer type, read as int64 --- */

typedef enum { K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64 } Kind;

typedef struct {
    Py_buffer view;
    int held;
    const char *data;
    Kind kind;
} Column;

static inline int64_t col_get(const Column *c, Py_ssize_t i)
{
    const char *p = c->data;
    switch (c->kind) {
    case K_I8: return ((const int8_t *)p)[i];
    case K_U8: return ((const uint8_t *)p)[i];
    case K_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case K_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case K_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case K_U32: return load_u32(p + 4 * i);
    case K_I64: return load_i64(p + 8 * i);
    default: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (int64_t)v; } /* wraps, as astype */
    }
}

/* Take ``obj`` as a column of ``n`` integers (n < 0: any length, stored in *n). */
static int get_column(PyObject *obj, const char *name, Column *c, Py_ssize_t *n)
{
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "place_batch: %s must be a C-contiguous 1-D integer array, got %.80s",
                     name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    c->held = 1;
    char code = format_code(&c->view);
    Py_ssize_t size = c->view.itemsize;
    if (c->view.ndim != 1 || !code) {
        PyErr_Format(PyExc_TypeError,
                     "place_batch: %s must be a 1-D integer array in native byte order, "
                     "got format %s with %d dimensions",
                     name, c->view.format ? c->view.format : "B", c->view.ndim);
        return -1;
    }
    int s = is_signed(code);
    if (size == 1) c->kind = s ? K_I8 : K_U8;
    else if (size == 2) c->kind = s ? K_I16 : K_U16;
    else if (size == 4) c->kind = s ? K_I32 : K_U32;
    else if (size == 8) c->kind = s ? K_I64 : K_U64;
    else {
        PyErr_Format(PyExc_TypeError, "place_batch: %s has %zd-byte items, expected 1-8",
                     name, size);
        return -1;
    }
    Py_ssize_t len = c->view.shape[0];
    if (*n >= 0 && len != *n) {
        PyErr_Format(PyExc_ValueError,
                     "place_batch: %s has %zd values for a batch of %zd packets", name, len, *n);
        return -1;
    }
    *n = len;
    c->data = c->view.buf;
    return 0;
}

/* --- the table's arrays: 1-D or 2-D, any strides, one exact type --- */

typedef struct {
    Py_buffer view;
    int held;
    char *base;
    Py_ssize_t rows, cols, s0, s1;
} Matrix;

/* Take ``obj`` as an ``ndim``-D array of ``itemsize``-byte items of type ``code`` (the
 * int64 codes 'l' and 'q' are one type on LP64). */
static int get_matrix(PyObject *obj, const char *name, int ndim, char code, Py_ssize_t itemsize,
                      int writable, Matrix *m)
{
    int flags = PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (obj == NULL || PyObject_GetBuffer(obj, &m->view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "place_batch: table.%s must be a %sbuffer of %zd-byte "
                     "integers, got %.80s", name, writable ? "writable " : "", itemsize,
                     obj ? Py_TYPE(obj)->tp_name : "nothing");
        return -1;
    }
    m->held = 1;
    char got = format_code(&m->view);
    int same = got == code || (itemsize == 8 && sizeof(long) == 8 &&
                               ((got == 'l' && code == 'q') || (got == 'L' && code == 'Q')));
    if (m->view.ndim != ndim || m->view.itemsize != itemsize || !same) {
        PyErr_Format(PyExc_TypeError,
                     "place_batch: table.%s must be a %d-D array of format %c, got format %s "
                     "with %d dimensions", name, ndim, code,
                     m->view.format ? m->view.format : "B", m->view.ndim);
        return -1;
    }
    m->base = m->view.buf;
    m->rows = m->view.shape[0];
    m->s0 = m->view.strides[0];
    m->cols = ndim == 2 ? m->view.shape[1] : 1;
    m->s1 = ndim == 2 ? m->view.strides[1] : 0;
    return 0;
}

static inline char *cell(const Matrix *m, Py_ssize_t r, Py_ssize_t c)
{
    return m->base + r * m->s0 + c * m->s1;
}

/* --- geometry --- */

typedef struct {
    int64_t generations, slots, slot_size, mtu, ppc, offset_bits, user_bits;
} Geometry;

static int int_attr(PyObject *obj, const char *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (v == NULL)
        return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_geometry(PyObject *table, Geometry *g)
{
    PyObject *geo = PyObject_GetAttrString(table, "geometry");
    if (geo == NULL)
        return -1;
    PyObject *layout = PyObject_GetAttrString(geo, "layout");
    int bad = layout == NULL || int_attr(geo, "generations", &g->generations) ||
              int_attr(geo, "slots", &g->slots) || int_attr(geo, "slot_size", &g->slot_size) ||
              int_attr(geo, "mtu", &g->mtu) || int_attr(geo, "packets_per_chunk", &g->ppc) ||
              int_attr(layout, "offset_bits", &g->offset_bits) ||
              int_attr(layout, "user_bits", &g->user_bits);
    Py_XDECREF(layout);
    Py_DECREF(geo);
    if (bad)
        return -1;
    if (g->slot_size <= 0 || g->ppc <= 0 || g->slots < 0 || g->generations < 0 ||
        g->user_bits < 1 || g->offset_bits < 1 || g->user_bits + g->offset_bits > 31) {
        PyErr_Format(PyExc_ValueError,
                     "place_batch: geometry needs slot_size > 0, packets_per_chunk > 0, "
                     "slots, generations >= 0 and an immediate split with id bits >= 1; got "
                     "slot_size=%lld packets_per_chunk=%lld slots=%lld generations=%lld "
                     "offset_bits=%lld user_bits=%lld",
                     (long long)g->slot_size, (long long)g->ppc, (long long)g->slots,
                     (long long)g->generations, (long long)g->offset_bits,
                     (long long)g->user_bits);
        return -1;
    }
    return 0;
}

/* --- candidates: packets that passed rules 1-7 and carry data --- */

enum { C_OK, C_NO_REGION, C_BAD_REGION, C_OUTSIDE_REGION, C_BAD_SOURCE, C_OUTSIDE_SOURCE };

typedef struct {
    Py_ssize_t row;  /* packet index in the batch */
    int64_t entry;   /* key-table entry index */
    int64_t within;  /* byte offset within the slot */
    int64_t n;       /* payload bytes */
    char *guard;     /* its packet byte */
    char *count;     /* its chunk count (uint32) */
    char *dst;       /* where the payload goes (NULL: nothing is copied) */
    const char *src; /* where it comes from */
    int status;      /* C_*: why it cannot be placed, if so */
    int64_t region, start, limit; /* for the message of a C_OUTSIDE_* or C_BAD_* */
} Candidate;

/* Rules 1-7 over the batch (no Python, no GIL). Returns the number of candidates, or -1
 * with *bad_row set when a packet indexes past the table's arrays. */
static Py_ssize_t classify(const Geometry *g, const Matrix *entries, const Matrix *packets,
                           const Matrix *counts, const Column *gens, const Column *remote,
                           const Column *imms, const Column *lengths, Py_ssize_t n,
                           uint8_t *verdicts, Candidate *cand, Py_ssize_t *bad_row,
                           int *bad_what)
{
    const int64_t fragments = (32 + g->user_bits - 1) / g->user_bits;
    const int64_t id_shift = g->offset_bits + g->user_bits;
    const int64_t pkt_mask = ((int64_t)1 << g->offset_bits) - 1;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t gen = col_get(gens, i), roff = col_get(remote, i), len = col_get(lengths, i);
        int64_t imm = col_get(imms, i);
        if (gen < 0 || gen >= g->generations) { /* rule 1 */
            verdicts[i] = STALE_GENERATION;
            continue;
        }
        int64_t slot = roff >= 0 ? roff / g->slot_size : -1;
        if (roff < 0 || len < 0 || slot >= g->slots) { /* rule 2 */
            verdicts[i] = OUT_OF_RANGE;
            continue;
        }
        int64_t within = roff % g->slot_size;
        int64_t e = gen * g->slots + slot;
        if (e >= entries->rows) {
            *bad_row = i, *bad_what = 0;
            return -1;
        }
        int64_t msg_id = imm >> id_shift, pkt = (imm >> g->user_bits) & pkt_mask;
        if (load_i64(cell(entries, e, E_REGION)) < 0 ||
            load_i64(cell(entries, e, E_MSG_ID)) != msg_id) { /* rule 3 */
            verdicts[i] = LATE;
            continue;
        }
        int64_t bound = load_i64(cell(entries, e, E_LENGTH));
        uint8_t v;
        if (len == 0) /* rule 4: immediate-only */
            v = pkt >= fragments ? MALFORMED : PLACED;
        else if (within != wmul(pkt, g->mtu)) /* rule 5 */
            v = MALFORMED;
        else if (wadd(within, len) > bound) /* rule 6 */
            v = OUT_OF_RANGE;
        else { /* rule 7 */
            int64_t rest = wsub(bound, within);
            v = len != (g->mtu < rest ? g->mtu : rest) ? MALFORMED : PLACED;
        }
        verdicts[i] = v;
        if (v != PLACED || len == 0)
            continue;
        int64_t chunk = pkt / g->ppc;
        if (slot >= packets->rows || pkt >= packets->cols || slot >= counts->rows ||
            chunk >= counts->cols) {
            *bad_row = i, *bad_what = 1;
            return -1;
        }
        Candidate *c = &cand[k++];
        c->row = i, c->entry = e, c->within = within, c->n = len;
        c->guard = cell(packets, slot, pkt);
        c->count = cell(counts, slot, chunk);
        c->dst = NULL, c->src = NULL, c->status = C_OK;
    }
    return k;
}

/* Would the bad candidate ``i`` be placed? Only if no earlier candidate for the same
 * packet byte reached its region: the first such one is placed (or is bad itself), and
 * every later one is a duplicate. A byte set before the batch makes it a duplicate. */
static int would_place(const Candidate *cand, Py_ssize_t i)
{
    if (*cand[i].guard)
        return 0;
    for (Py_ssize_t j = 0; j < i; j++)
        if (cand[j].guard == cand[i].guard && cand[j].status != C_NO_REGION)
            return 0;
    return 1;
}

/* Rule 8, the copies and the counts, in batch order (no Python, no GIL). */
static void apply(Candidate *cand, Py_ssize_t k, uint8_t *verdicts)
{
    for (Py_ssize_t i = 0; i < k; i++) {
        Candidate *c = &cand[i];
        if (*c->guard) {
            verdicts[c->row] = DUPLICATE; /* placed (or sealed) already: the first wins */
            continue;
        }
        if (c->status != C_OK) { /* C_NO_REGION: a region this writer cannot reach */
            verdicts[c->row] = MALFORMED;
            continue;
        }
        if (c->dst)
            memmove(c->dst, c->src, (size_t)c->n);
        *c->guard = 1;
        store_u32(c->count, load_u32(c->count) + 1);
    }
}

/* --- regions: table.regions[id] -> a writable byte buffer, looked up once per id --- */

typedef struct {
    int64_t id;
    int state; /* C_OK, C_NO_REGION or C_BAD_REGION */
    Py_buffer view;
} Region;

typedef struct {
    Region *items;
    Py_ssize_t len, cap;
} Regions;

static Region *region_of(PyObject *mapping, Regions *rs, int64_t id)
{
    for (Py_ssize_t i = rs->len - 1; i >= 0; i--)
        if (rs->items[i].id == id)
            return &rs->items[i];
    if (rs->len == rs->cap) {
        Py_ssize_t cap = rs->cap ? 2 * rs->cap : 8;
        Region *items = realloc(rs->items, (size_t)cap * sizeof(Region));
        if (items == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        rs->items = items, rs->cap = cap;
    }
    Region *r = &rs->items[rs->len];
    r->id = id, r->state = C_NO_REGION;
    PyObject *key = PyLong_FromLongLong(id), *obj;
    if (key == NULL)
        return NULL;
    if (PyDict_CheckExact(mapping)) {
        obj = PyDict_GetItemWithError(mapping, key);
        Py_XINCREF(obj);
    } else {
        obj = PyObject_CallMethod(mapping, "get", "O", key);
    }
    Py_DECREF(key);
    if (obj == NULL && PyErr_Occurred())
        return NULL;
    if (obj != NULL && obj != Py_None) {
        r->state = C_BAD_REGION; /* until it shows a writable 1-D byte buffer */
        if (PyObject_GetBuffer(obj, &r->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) == 0) {
            if (r->view.ndim <= 1 && r->view.itemsize == 1)
                r->state = C_OK;
            else
                PyBuffer_Release(&r->view);
        } else {
            PyErr_Clear();
        }
    }
    Py_XDECREF(obj);
    rs->len++;
    return r;
}

static void regions_release(Regions *rs)
{
    for (Py_ssize_t i = 0; i < rs->len; i++)
        if (rs->items[i].state == C_OK)
            PyBuffer_Release(&rs->items[i].view);
    free(rs->items);
}

/* A 1-D C-contiguous byte buffer of an object (0), or -1 with no exception set. */
static int byte_buffer(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return -1;
    }
    if (view->ndim > 1 || view->itemsize != 1) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* --- place_batch --- */

static const char *const STATUS_TEXT[] = {
    "", "", "its region is not a writable 1-D byte buffer",
    "its bytes would fall outside its region", "its payload is not a 1-D byte buffer",
    "its payload would be read from outside its buffer",
};

static PyObject *place_batch(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"table", "generations", "remote_offsets", "imms", "lengths",
                             "payloads", "payload_offsets", NULL};
    PyObject *table, *o_gens, *o_remote, *o_imms, *o_lengths, *payloads,
        *o_offsets = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|O:place_batch", kwlist, &table,
                                     &o_gens, &o_remote, &o_imms, &o_lengths, &payloads,
                                     &o_offsets))
        return NULL;
    (void)self;

    Geometry g;
    Matrix entries = {0}, packets = {0}, counts = {0}, discards = {0};
    Column gens = {0}, remote = {0}, imms = {0}, lengths = {0}, offsets = {0};
    Py_buffer staging = {0}, verdict_view = {0};
    int staging_held = 0, verdict_held = 0;
    PyObject *verdicts = NULL, *regions = NULL, *seq = NULL, *result = NULL;
    PyObject *t_entries = NULL, *t_packets = NULL, *t_counts = NULL, *t_discards = NULL;
    Candidate *cand = NULL;
    Py_buffer *sources = NULL; /* one per candidate for a sequence of payload buffers */
    Py_ssize_t n = -1, k = 0, n_sources = 0;
    Regions rs = {0};
    int staged = o_offsets != Py_None, copying = payloads != Py_None;

    /* 1. the geometry, the table's arrays and the batch's columns */
    if (get_geometry(table, &g) < 0)
        goto done;
    t_entries = PyObject_GetAttrString(table, "entries");
    t_packets = PyObject_GetAttrString(table, "packets");
    t_counts = PyObject_GetAttrString(table, "counts");
    t_discards = PyObject_GetAttrString(table, "discards");
    if (t_entries == NULL || t_packets == NULL || t_counts == NULL || t_discards == NULL)
        goto done;
    if (get_matrix(t_entries, "entries", 2, 'q', 8, 0, &entries) < 0 ||
        get_matrix(t_packets, "packets", 2, 'B', 1, 1, &packets) < 0 ||
        get_matrix(t_counts, "counts", 2, 'I', 4, 1, &counts) < 0 ||
        get_matrix(t_discards, "discards", 1, 'q', 8, 1, &discards) < 0)
        goto done;
    if (entries.cols < E_MIN_WORDS || discards.rows < N_VERDICTS - 1) {
        PyErr_Format(PyExc_ValueError, "place_batch: table.entries needs >= %d words per "
                     "entry (got %zd) and table.discards %d counters (got %zd)", E_MIN_WORDS,
                     entries.cols, N_VERDICTS - 1, discards.rows);
        goto done;
    }
    if (get_column(o_gens, "generations", &gens, &n) < 0 ||
        get_column(o_remote, "remote_offsets", &remote, &n) < 0 ||
        get_column(o_imms, "imms", &imms, &n) < 0 ||
        get_column(o_lengths, "lengths", &lengths, &n) < 0 ||
        (staged && get_column(o_offsets, "payload_offsets", &offsets, &n) < 0))
        goto done;
    if (copying && staged) {
        if (byte_buffer(payloads, &staging) < 0) {
            PyErr_Format(PyExc_TypeError, "place_batch: with payload_offsets, payloads must "
                         "be one C-contiguous 1-D byte buffer, got %.80s",
                         Py_TYPE(payloads)->tp_name);
            goto done;
        }
        staging_held = 1;
    } else if (copying) {
        seq = PySequence_Fast(payloads, "place_batch: payloads must be a byte buffer with "
                                        "payload_offsets, a sequence of buffers, or None");
        if (seq == NULL)
            goto done;
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_Format(PyExc_ValueError, "place_batch: payloads has %zd buffers for a batch "
                         "of %zd packets", PySequence_Fast_GET_SIZE(seq), n);
            goto done;
        }
    }
    if (copying) {
        regions = PyObject_GetAttrString(table, "regions");
        if (regions == NULL)
            goto done;
    }
    verdicts = PyObject_CallFunction(np_empty, "nO", n, np_uint8);
    if (verdicts == NULL || PyObject_GetBuffer(verdicts, &verdict_view, PyBUF_WRITABLE) < 0)
        goto done;
    verdict_held = 1;
    cand = malloc((size_t)(n ? n : 1) * sizeof(Candidate));
    if (cand == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    /* 2. rules 1-7 */
    Py_ssize_t bad_row = 0;
    int bad_what = 0;
    Py_BEGIN_ALLOW_THREADS
    k = classify(&g, &entries, &packets, &counts, &gens, &remote, &imms, &lengths, n,
                 verdict_view.buf, cand, &bad_row, &bad_what);
    Py_END_ALLOW_THREADS
    if (k < 0) {
        PyErr_Format(PyExc_IndexError, "place_batch: packet %zd indexes past table.%s "
                     "(shape %zd x %zd)", bad_row, bad_what ? "packets or table.counts" :
                     "entries", bad_what ? packets.rows : entries.rows,
                     bad_what ? packets.cols : entries.cols);
        goto done;
    }

    /* 3. where each candidate's bytes come from and go to */
    int any_bad = 0;
    if (copying && k) {
        if (seq && (sources = malloc((size_t)k * sizeof(Py_buffer))) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            Candidate *c = &cand[i];
            const char *row = cell(&entries, c->entry, 0);
            c->region = load_i64(row + E_REGION * entries.s1);
            Region *r = region_of(regions, &rs, c->region);
            if (r == NULL)
                goto done;
            if (r->state != C_OK) {
                c->status = r->state;
                any_bad |= r->state == C_BAD_REGION;
                continue;
            }
            /* the destination: region[start : start + n] */
            c->start = wadd(load_i64(row + E_OFFSET * entries.s1), c->within);
            c->limit = r->view.len;
            if (c->start < 0 || c->start > c->limit || c->n > c->limit - c->start) {
                c->status = C_OUTSIDE_REGION, any_bad = 1;
                continue;
            }
            c->dst = (char *)r->view.buf + c->start;
            /* the source: staging[offset : offset + n], or the packet's own buffer */
            if (staging_held) {
                c->start = col_get(&offsets, c->row), c->limit = staging.len;
                if (c->start < 0 || c->start > c->limit || c->n > c->limit - c->start) {
                    c->status = C_OUTSIDE_SOURCE, any_bad = 1;
                    continue;
                }
                c->src = (const char *)staging.buf + c->start;
            } else {
                Py_buffer *view = &sources[n_sources];
                PyObject *item = PySequence_Fast_GET_ITEM(seq, c->row);
                if (byte_buffer(item, view) < 0) {
                    c->status = C_BAD_SOURCE, any_bad = 1;
                    continue;
                }
                n_sources++;
                c->start = 0, c->limit = view->len;
                if (c->n > view->len) {
                    c->status = C_OUTSIDE_SOURCE, any_bad = 1;
                    continue;
                }
                c->src = view->buf;
            }
        }
    }

    /* 4. refuse a batch that would place a packet it cannot copy; else apply it */
    Py_ssize_t refused = -1;
    uint8_t *v = verdict_view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; any_bad && i < k && refused < 0; i++)
        if (cand[i].status != C_OK && cand[i].status != C_NO_REGION && would_place(cand, i))
            refused = i;
    if (refused < 0) {
        apply(cand, k, v);
        int64_t tally[N_VERDICTS] = {0};
        for (Py_ssize_t i = 0; i < n; i++)
            tally[v[i]]++;
        for (int r = 1; r < N_VERDICTS; r++) {
            char *p = cell(&discards, r - 1, 0);
            store_i64(p, wadd(load_i64(p), tally[r]));
        }
    }
    Py_END_ALLOW_THREADS
    if (refused >= 0) {
        Candidate *c = &cand[refused];
        PyErr_Format(c->status == C_BAD_REGION || c->status == C_BAD_SOURCE
                         ? PyExc_TypeError : PyExc_ValueError,
                     "place_batch: packet %zd (region %lld, %lld bytes): %s (at %lld of "
                     "%lld bytes); nothing was placed", c->row, (long long)c->region,
                     (long long)c->n, STATUS_TEXT[c->status], (long long)c->start,
                     (long long)c->limit);
        goto done;
    }
    result = verdicts;
    verdicts = NULL;

done:
    for (Py_ssize_t i = 0; i < n_sources; i++)
        PyBuffer_Release(&sources[i]);
    free(sources);
    free(cand);
    regions_release(&rs);
    Column *cols[] = {&gens, &remote, &imms, &lengths, &offsets};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        if (cols[i]->held)
            PyBuffer_Release(&cols[i]->view);
    Matrix *mats[] = {&entries, &packets, &counts, &discards};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        if (mats[i]->held)
            PyBuffer_Release(&mats[i]->view);
    if (staging_held)
        PyBuffer_Release(&staging);
    if (verdict_held)
        PyBuffer_Release(&verdict_view);
    Py_XDECREF(verdicts);
    Py_XDECREF(regions);
    Py_XDECREF(seq);
    Py_XDECREF(t_entries);
    Py_XDECREF(t_packets);
    Py_XDECREF(t_counts);
    Py_XDECREF(t_discards);
    return result;
}

/* --- arrivals: one receive's packet and chunk bitmaps (sdr.chunk_bitmap, sdr.recv_table) ---
 *
 *   mark_arrivals(packets, counts, expected, chunks, have, fragments, offsets, values,
 *                 lengths, per_chunk) -> (new, duplicates, imm_only, done)
 *
 * The native twin of RecvTable._apply for the rows of one receive, in order: a row with
 * data sets its packet's bit (a duplicate if set already) and counts it to its chunk; a
 * chunk whose count reaches its expected count completes (its index goes to ``done``,
 * int64, ascending); every row's immediate fragment ``values[i]`` is taken at
 * ``offsets[i] % len(have)`` when none arrived there before (the first arrival wins).
 * Every offset is checked against the bitmap before anything is written. */

typedef struct {
    Py_buffer view;
    int held;
} Arg;

/* ``obj`` as a C-contiguous 1-D array of ``code`` (``n``: its length, or -1 to learn it);
 * errors name ``arg_func`` and ``name``. */
static int get_arg(const char *arg_func, PyObject *obj, const char *name, char code,
                   Py_ssize_t itemsize, int writable, Arg *a, Py_ssize_t *n)
{
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &a->view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s must be a C-contiguous %sarray, got %.80s",
                     arg_func, name, writable ? "writable " : "", Py_TYPE(obj)->tp_name);
        return -1;
    }
    a->held = 1;
    char got = format_code(&a->view);
    if (code == '?') {
        const char *f = a->view.format ? a->view.format : "B";
        got = (f[0] == '?' && f[1] == 0) ? '?' : 0;
    }
    int same = got == code || (itemsize == 8 && sizeof(long) == 8 && got == 'l' && code == 'q');
    if (a->view.ndim != 1 || a->view.itemsize != itemsize || !same) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a 1-D array of format %c, "
                     "got format %s with %d dimensions", arg_func, name, code,
                     a->view.format ? a->view.format : "B", a->view.ndim);
        return -1;
    }
    if (*n >= 0 && a->view.shape[0] != *n) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %zd values, expected %zd", arg_func, name,
                     a->view.shape[0], *n);
        return -1;
    }
    *n = a->view.shape[0];
    return 0;
}

static PyObject *mark_arrivals(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[11] = {NULL};
    Py_ssize_t per_chunk;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOn|OO:mark_arrivals", &o[0], &o[1], &o[2], &o[3],
                          &o[4], &o[5], &o[6], &o[7], &o[8], &per_chunk, &o[9], &o[10]))
        return NULL;
    Arg a[11] = {{{0}, 0}};
    int keep = o[9] != NULL && o[9] != Py_None && o[10] != NULL && o[10] != Py_None;
    PyObject *done = NULL, *result = NULL;
    Py_ssize_t n_packets = -1, n_chunks = -1, n_frag = -1, rows = -1;
    if (get_arg("mark_arrivals", o[0], "packets", '?', 1, 1, &a[0], &n_packets) < 0 ||
        get_arg("mark_arrivals", o[1], "counts", 'I', 4, 1, &a[1], &n_chunks) < 0 ||
        get_arg("mark_arrivals", o[2], "expected", 'I', 4, 0, &a[2], &n_chunks) < 0 ||
        get_arg("mark_arrivals", o[3], "chunks", '?', 1, 1, &a[3], &n_chunks) < 0 ||
        get_arg("mark_arrivals", o[4], "have", '?', 1, 1, &a[4], &n_frag) < 0 ||
        get_arg("mark_arrivals", o[5], "fragments", 'I', 4, 1, &a[5], &n_frag) < 0 ||
        get_arg("mark_arrivals", o[6], "offsets", 'q', 8, 0, &a[6], &rows) < 0 ||
        get_arg("mark_arrivals", o[7], "values", 'I', 4, 0, &a[7], &rows) < 0 ||
        get_arg("mark_arrivals", o[8], "lengths", 'q', 8, 0, &a[8], &rows) < 0 ||
        (keep && (get_arg("mark_arrivals", o[9], "crcs", 'q', 8, 0, &a[9], &rows) < 0 ||
                  get_arg("mark_arrivals", o[10], "sums", 'q', 8, 1, &a[10], &n_packets) < 0)))
        goto out;
    if (per_chunk < 1 || n_frag < 1 || n_chunks < (n_packets + per_chunk - 1) / per_chunk) {
        PyErr_Format(PyExc_ValueError, "mark_arrivals: %zd chunks of %zd packets cannot hold "
                     "%zd packets (or no fragments: %zd)", n_chunks, per_chunk, n_packets, n_frag);
        goto out;
    }
    const int64_t *off = a[6].view.buf, *len = a[8].view.buf;
    for (Py_ssize_t i = 0; i < rows; i++)  /* every bound before any write */
        if (off[i] < 0 || (len[i] != 0 && off[i] >= n_packets)) {
            PyErr_Format(PyExc_ValueError, "mark_arrivals: row %zd: packet %lld is outside "
                         "the receive's %zd packets; nothing was marked", i,
                         (long long)off[i], n_packets);
            goto out;
        }
    done = PyObject_CallFunction(np_empty, "ns", rows, "int64");
    if (done == NULL)
        goto out;
    Py_buffer dv;
    if (PyObject_GetBuffer(done, &dv, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto out;
    uint8_t *pk = a[0].view.buf, *ch = a[3].view.buf, *have = a[4].view.buf;
    uint32_t *counts = a[1].view.buf, *frags = a[5].view.buf;
    const uint32_t *expected = a[2].view.buf, *values = a[7].view.buf;
    int64_t *out = dv.buf;
    const int64_t *crcs = keep ? a[9].view.buf : NULL;
    int64_t *sums = keep ? a[10].view.buf : NULL;
    Py_ssize_t fresh = 0, dup = 0, imm_only = 0, k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        int64_t p = off[i];
        if (len[i] == 0) {
            imm_only++;
        } else if (pk[p]) {
            dup++;
        } else {
            pk[p] = 1;
            fresh++;
            if (sums != NULL)
                sums[p] = crcs[i];
            Py_ssize_t c = (Py_ssize_t)(p / per_chunk);
            if (++counts[c] == expected[c]) {
                ch[c] = 1;
                out[k++] = c;
            }
        }
        Py_ssize_t f = (Py_ssize_t)(p % n_frag);
        if (!have[f]) {
            have[f] = 1;
            frags[f] = values[i];
        }
    }
    for (Py_ssize_t i = 1; i < k; i++) {  /* ascending (insertion: a batch completes few) */
        int64_t v = out[i];
        Py_ssize_t j = i;
        for (; j > 0 && out[j - 1] > v; j--)
            out[j] = out[j - 1];
        out[j] = v;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&dv);
    PyObject *trimmed = PySequence_GetSlice(done, 0, k);
    if (trimmed != NULL)
        result = Py_BuildValue("nnnN", fresh, dup, imm_only, trimmed);
out:
    for (int i = 0; i < 11; i++)
        if (a[i].held)
            PyBuffer_Release(&a[i].view);
    Py_XDECREF(done);
    return result;
}

/* chunk_crcs(data, chunk_size, length, chunks, out): zlib's CRC-32 of each chunk
 * data[c * chunk_size : min((c + 1) * chunk_size, length)] into out (uint32, one per
 * chunk). Every bound is checked before the first checksum: length within data, each
 * chunk starting inside the message (chunk 0 of an empty message is the empty one). */
static PyObject *chunk_crcs(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *data_obj, *chunks_obj, *out_obj;
    Py_ssize_t size, length;
    if (!PyArg_ParseTuple(args, "OnnOO:chunk_crcs", &data_obj, &size, &length, &chunks_obj,
                          &out_obj))
        return NULL;
    Py_buffer data, chunks, out;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(chunks_obj, &chunks, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&chunks);
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *result = NULL;
    char ck = format_code(&chunks), ok = format_code(&out);
    Py_ssize_t n = chunks.len / 8;
    if (chunks.itemsize != 8 || !is_signed(ck) || out.itemsize != 4 || (ok != 'I' && ok != 'L')) {
        PyErr_SetString(PyExc_TypeError, "chunk_crcs: chunks must be int64 and out uint32");
        goto done;
    }
    if (out.len / 4 != n) {
        PyErr_Format(PyExc_ValueError, "chunk_crcs: %zd chunks but room for %zd checksums", n,
                     out.len / 4);
        goto done;
    }
    if (size <= 0 || length < 0 || length > data.len) {
        PyErr_Format(PyExc_ValueError,
                     "chunk_crcs: chunk size %zd and length %zd do not fit %zd bytes of data",
                     size, length, data.len);
        goto done;
    }
    const int64_t *c = chunks.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t k = load_i64((const char *)(c + i));
        if (k < 0 || (k > 0 && k >= length / size + (length % size != 0))) {
            PyErr_Format(PyExc_ValueError, "chunk_crcs: chunk %lld is outside the %zd-byte message",
                         (long long)k, length);
            goto done;
        }
    }
    const uint8_t *base = data.buf;
    char *dst = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t start = load_i64((const char *)(c + i)) * size;
        int64_t stop = size < length - start ? start + size : length;
        store_u32(dst + 4 * i, ~crc_raw(0xFFFFFFFFu, base + start, (size_t)(stop - start)));
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&chunks);
    PyBuffer_Release(&data);
    return result;
}

/* chunk_sums(sums, per_chunk, mtu, length, chunks, out): zlib's CRC-32 of each chunk
 * combined from its packets' (``sums``, int64 per packet of a ``length``-byte receive of
 * ``mtu``-byte packets, -1: not known) into ``out`` (int64 per chunk; -1 where a packet's
 * is not known). Every bound is checked before the first combination. */
static PyObject *chunk_sums(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *o[3];
    Py_ssize_t per_chunk, mtu, length;
    if (!PyArg_ParseTuple(args, "OnnnOO:chunk_sums", &o[0], &per_chunk, &mtu, &length, &o[1],
                          &o[2]))
        return NULL;
    Arg a[3] = {{{0}, 0}};
    PyObject *result = NULL;
    Py_ssize_t n_packets = -1, rows = -1;
    if (get_arg("chunk_sums", o[0], "sums", 'q', 8, 0, &a[0], &n_packets) < 0 ||
        get_arg("chunk_sums", o[1], "chunks", 'q', 8, 0, &a[1], &rows) < 0 ||
        get_arg("chunk_sums", o[2], "out", 'q', 8, 1, &a[2], &rows) < 0)
        goto out;
    if (per_chunk < 1 || mtu < 1 || length < 0 || n_packets != length / mtu + (length % mtu != 0)) {
        PyErr_Format(PyExc_ValueError, "chunk_sums: %zd packet sums do not fit %zd bytes in "
                     "%zd-byte packets (%zd per chunk)", n_packets, length, mtu, per_chunk);
        goto out;
    }
    const int64_t *sums = a[0].view.buf, *chunks = a[1].view.buf;
    int64_t *dst = a[2].view.buf;
    Py_ssize_t n_chunks = n_packets / per_chunk + (n_packets % per_chunk != 0);
    for (Py_ssize_t i = 0; i < rows; i++)
        if (chunks[i] < 0 || chunks[i] >= n_chunks) {
            PyErr_Format(PyExc_ValueError, "chunk_sums: chunk %lld is outside the receive's "
                         "%zd chunks", (long long)chunks[i], n_chunks);
            goto out;
        }
    Py_BEGIN_ALLOW_THREADS
    uint32_t full = crc_x8n((uint64_t)mtu);
    for (Py_ssize_t i = 0; i < rows; i++) {
        Py_ssize_t first = (Py_ssize_t)chunks[i] * per_chunk;
        Py_ssize_t stop = first + per_chunk < n_packets ? first + per_chunk : n_packets;
        int64_t crc = sums[first] > 0xFFFFFFFFll ? -1 : sums[first];
        for (Py_ssize_t p = first + 1; crc >= 0 && p < stop; p++) {
            int64_t part = sums[p];
            if (part < 0 || part > 0xFFFFFFFFll) {
                crc = -1;
                break;
            }
            Py_ssize_t size = length - p * mtu < mtu ? length - p * mtu : mtu;
            uint32_t shift = size == mtu ? full : crc_x8n((uint64_t)size);
            crc = crc_mul((uint32_t)crc, shift) ^ (uint32_t)part;
        }
        dst[i] = crc;
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
out:
    for (int i = 0; i < 3; i++)
        if (a[i].held)
            PyBuffer_Release(&a[i].view);
    return result;
}

static PyMethodDef methods[] = {
    {"place_batch", (PyCFunction)(void (*)(void))place_batch, METH_VARARGS | METH_KEYWORDS,
     "place_batch(table, generations, remote_offsets, imms, lengths, payloads, "
     "payload_offsets=None)\n--\n\n"
     "Validate and place one batch of received packets, in order; returns uint8 verdicts.\n"
     "The native implementation of sdr.placement.place_batch (same rules, same results)."},
    {"mark_arrivals", mark_arrivals, METH_VARARGS,
     "mark_arrivals(packets, counts, expected, chunks, have, fragments, offsets, values, "
     "lengths, per_chunk, crcs=None, sums=None)\n--\n\n"
     "One receive's rows of a batch, in order, on its bitmaps and immediate fragments; "
     "returns (new, duplicates, imm_only, done chunks). The native RecvTable._apply. With "
     "``crcs`` (int64 per row) and ``sums`` (int64 per packet), a new packet's checksum is "
     "kept in ``sums``."},
    {"chunk_sums", chunk_sums, METH_VARARGS,
     "chunk_sums(sums, per_chunk, mtu, length, chunks, out)\n--\n\n"
     "zlib's CRC-32 of each of ``chunks`` combined from its packets' checksums into ``out`` "
     "(int64, -1 where one is not known). The native ReceiveBitmap.chunk_sums."},
    {"chunk_crcs", chunk_crcs, METH_VARARGS,
     "chunk_crcs(data, chunk_size, length, chunks, out)\n--\n\n"
     "zlib's CRC-32 of each of ``chunks`` of the first ``length`` bytes of ``data`` into "
     "``out`` (uint32). The native sdr.reliability.integrity.chunk_crcs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_placement",
    "The software NIC's receive step (sdr.placement.place_batch) in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__placement(void)
{
    crc32_setup();
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    np_empty = PyObject_GetAttrString(numpy, "empty");
    np_uint8 = PyObject_GetAttrString(numpy, "uint8");
    Py_DECREF(numpy);
    if (np_empty == NULL || np_uint8 == NULL)
        return NULL;
    return PyModule_Create(&module);
}
