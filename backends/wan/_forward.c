/* The WAN emulator's forwarding loop in C: sdr.backends.wan._forward.
 *
 * Python (sdr/backends/wan/native_forwarder.py) owns the link: it asks the one link model
 * (sdr.simulator.link_model.LinkDirection) for every offered packet's random decisions
 * (loss and its kind, reorder hold, duplicate, corrupt and where/which bit) and hands
 * them over in chunks with Loop.feed(). This loop owns what needs the clock: it reads
 * packets from the ports in batches, runs each direction's drop-tail queue and
 * serialization at the link rate (the model's formula: a FIFO single server finishes a
 * packet at max(now, previous finish) + size / rate), drops packets in blackout windows,
 * applies the decided impairments, keeps the survivors in a delay line (a heap of packet
 * slots keyed by delivery time, CLOCK_MONOTONIC) and writes each copy when it is due.
 *
 *   Loop(ports, rates, delays, queues, blackouts, corrupt_skip, max_packet, slots,
 *        late_after)
 *   loop.feed(direction, loss, extra, dup, corrupt, where, bit)   # decision columns
 *   loop.run(seconds, low0, low1) -> 0 (time is up) | 1 (direction k has < low_k left)
 *   loop.pending(direction), loop.room(direction), loop.stats(direction) -> dict
 *
 * A port is (fd, kind, ipv4 host as int, udp port): kind 0 is a TUN device (one packet
 * per read/write), kind 1 a UDP socket (recvmmsg; sendto the target). Ports come in
 * couples: an even index is an a side, a packet read on port i leaves through port i ^ 1,
 * and what the even ports read goes through direction 0 (a to b).
 *
 * run() releases the GIL; no Python object is touched per packet. Every length is checked
 * against the slot before a read lands there, every decision index is masked into its
 * ring, and feed() validates every column (type, length, range) before copying any.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>

/* PyErr_Format knows no %g: a ValueError formatted by vsnprintf. */
static void value_error(const char *fmt, ...)
{
    char text[320];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    PyErr_SetString(PyExc_ValueError, text);
}

#define MAX_PORTS 64
#define MAX_BLACKOUTS 64
#define BURST 32                    /* packets read from one port before delivering again */
#define RING_BITS 17                /* decisions buffered per direction */
#define RING (1u << RING_BITS)
#define RING_MASK (RING - 1u)
#define LOW_WATER 16384u            /* run()'s default low mark of decisions left */
#define MAX_POOL_BYTES (4ull << 30) /* virtual size of the packet pool */
#define QUEUE_SLACK_BYTES 1e-6      /* as the link model: float rounding of the backlog */

enum { KIND_TUN = 0, KIND_UDP = 1 };
enum { LOSS_NONE = 0, LOSS_RANDOM = 1, LOSS_BURST = 2 };

typedef struct {
    int fd, kind;
    struct sockaddr_in target;
} Port;

typedef struct {
    double when;
    uint64_t seq; /* equal times leave in arrival order */
    uint32_t slot;
    uint32_t out;
} Event;

typedef struct {
    /* decision ring: written by feed(), consumed one entry per offered packet */
    uint8_t loss[RING], dup[RING], bad[RING], bit[RING];
    double extra[RING], where[RING];
    uint64_t head, tail; /* head: next to use; tail: next to fill */
    double rate_bps, delay_s, queue_bytes, last_finish, start;
    double blackout[MAX_BLACKOUTS][2];
    int n_blackouts;
    /* counters */
    uint64_t packets, bytes, delivered, queue_drops, loss_random, loss_burst, blackout_drops,
        duplicated, reordered, corrupted, forwarded, write_errors, pool_drops, oversize, late;
    double max_backlog_bytes, max_lateness_s;
} Direction;

typedef struct {
    PyObject_HEAD
    Port ports[MAX_PORTS];
    int n_ports;
    Direction *dir[2];
    uint8_t *pool;
    size_t pool_bytes, slot_size;
    uint32_t n_slots, n_free;
    uint32_t *free_list, *length;
    uint8_t *refs;
    uint8_t *scratch; /* where packets go that find the pool empty */
    Event *heap;
    uint32_t heap_n, heap_cap;
    uint64_t seq;
    size_t corrupt_skip, max_packet;
    double late_after;
    int busy;
} Loop;

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --- the delay line: a binary min-heap on (when, seq) --- */

static int earlier(const Event *a, const Event *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static int heap_push(Loop *s, double when, uint32_t slot, uint32_t out)
{
    if (s->heap_n >= s->heap_cap)
        return -1;
    uint32_t i = s->heap_n++;
    Event e = {when, s->seq++, slot, out};
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!earlier(&e, &s->heap[parent]))
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = e;
    return 0;
}

static Event heap_pop(Loop *s)
{
    Event top = s->heap[0], last = s->heap[--s->heap_n];
    uint32_t i = 0, n = s->heap_n;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && earlier(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!earlier(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

/* --- the packet pool: fixed slots, a LIFO free list (keeps the touched set small) --- */

static inline uint8_t *slot_at(Loop *s, uint32_t slot) { return s->pool + (size_t)slot * s->slot_size; }

static inline void slot_release(Loop *s, uint32_t slot)
{
    if (slot < s->n_slots && s->refs[slot] > 0 && --s->refs[slot] == 0 && s->n_free < s->n_slots)
        s->free_list[s->n_free++] = slot;
}

static inline uint64_t pending_of(const Direction *d) { return d->tail - d->head; }

/* One packet of `len` bytes, read at `now` into `slot` on port `in`, meets the link. */
static void offer(Loop *s, int in, uint32_t slot, size_t len, double now)
{
    Direction *d = s->dir[in & 1];
    uint32_t out = (uint32_t)(in ^ 1);
    uint32_t i = (uint32_t)(d->head & RING_MASK); /* caller checked pending_of(d) > 0 */
    d->head++;
    d->packets++;
    d->bytes += len;
    if (d->start != d->start)
        d->start = now;
    double size = (double)len, bytes_per_s = d->rate_bps / 8.0;
    double queued = d->last_finish > now ? (d->last_finish - now) * bytes_per_s : 0.0;
    if (queued > d->max_backlog_bytes)
        d->max_backlog_bytes = queued;
    if (queued + size > d->queue_bytes + QUEUE_SLACK_BYTES) {
        d->queue_drops++;
        slot_release(s, slot);
        return;
    }
    d->last_finish = (d->last_finish > now ? d->last_finish : now) + size / bytes_per_s;
    double elapsed = now - d->start;
    for (int k = 0; k < d->n_blackouts; k++) {
        if (d->blackout[k][0] <= elapsed && elapsed < d->blackout[k][1]) {
            d->blackout_drops++;
            slot_release(s, slot);
            return;
        }
    }
    if (d->loss[i] != LOSS_NONE) {
        if (d->loss[i] == LOSS_BURST)
            d->loss_burst++;
        else
            d->loss_random++;
        slot_release(s, slot);
        return;
    }
    double arrive = d->last_finish + d->delay_s + d->extra[i];
    if (d->extra[i] > 0.0)
        d->reordered++;
    if (d->bad[i]) {
        d->corrupted++;
        if (len > s->corrupt_skip) {
            size_t span = len - s->corrupt_skip;
            double at = d->where[i] * (double)span; /* where in [0, 1): feed() checked */
            size_t pos = at < (double)(span - 1) ? (size_t)at : span - 1;
            slot_at(s, slot)[s->corrupt_skip + pos] ^= (uint8_t)(1u << (d->bit[i] & 7u));
        }
    }
    if (heap_push(s, arrive, slot, out) < 0) { /* cannot happen: 2 events per slot at most */
        d->pool_drops++;
        slot_release(s, slot);
        return;
    }
    d->delivered++;
    if (d->dup[i]) {
        s->refs[slot] = 2;
        if (heap_push(s, arrive + size / bytes_per_s, slot, out) == 0) {
            d->duplicated++;
            d->delivered++;
        } else {
            s->refs[slot] = 1;
        }
    }
}

static void deliver(Loop *s, double now)
{
    while (s->heap_n > 0 && s->heap[0].when <= now) {
        Event e = heap_pop(s);
        Port *p = &s->ports[e.out];
        Direction *d = s->dir[(e.out ^ 1u) & 1u];
        uint32_t len = s->length[e.slot];
        const uint8_t *buf = slot_at(s, e.slot);
        ssize_t n;
        if (p->kind == KIND_TUN)
            n = write(p->fd, buf, len);
        else
            n = sendto(p->fd, buf, len, 0, (const struct sockaddr *)&p->target, sizeof p->target);
        if (n < 0)
            d->write_errors++; /* queue full or interface gone: lost, as on a wire */
        else
            d->forwarded++;
        double late = now - e.when;
        if (late > d->max_lateness_s)
            d->max_lateness_s = late;
        if (late > s->late_after)
            d->late++;
        slot_release(s, e.slot);
    }
}

/* Take a slot for the next read; UINT32_MAX when the pool is empty. */
static inline uint32_t slot_take(Loop *s)
{
    if (s->n_free == 0)
        return UINT32_MAX;
    uint32_t slot = s->free_list[--s->n_free];
    s->refs[slot] = 1;
    return slot;
}

/* Read up to BURST packets from port `in`; returns how many were read (0: none waiting). */
static int read_port(Loop *s, int in, double now)
{
    Port *p = &s->ports[in];
    Direction *d = s->dir[in & 1];
    size_t cap = s->max_packet + 1; /* one byte more than allowed: a full read is oversize */
    int got = 0;
    if (p->kind == KIND_TUN) {
        while (got < BURST && pending_of(d) > 0) {
            uint32_t slot = slot_take(s);
            uint8_t *buf = slot == UINT32_MAX ? s->scratch : slot_at(s, slot);
            ssize_t n = read(p->fd, buf, cap);
            if (n < 0) {
                slot_release(s, slot);
                break;
            }
            got++;
            if ((size_t)n > s->max_packet || slot == UINT32_MAX) {
                if (slot == UINT32_MAX)
                    d->pool_drops++;
                else
                    d->oversize++;
                d->head++; /* the packet was offered: its decisions are used up */
                d->packets++;
                slot_release(s, slot);
                continue;
            }
            s->length[slot] = (uint32_t)n;
            offer(s, in, slot, (size_t)n, now);
        }
        return got;
    }
    struct mmsghdr msgs[BURST];
    struct iovec iov[BURST];
    uint32_t slots[BURST];
    unsigned want = 0;
    uint64_t left = pending_of(d);
    while (want < BURST && want < left) {
        uint32_t slot = slot_take(s);
        if (slot == UINT32_MAX)
            break;
        slots[want] = slot;
        iov[want].iov_base = slot_at(s, slot);
        iov[want].iov_len = cap;
        memset(&msgs[want], 0, sizeof msgs[want]);
        msgs[want].msg_hdr.msg_iov = &iov[want];
        msgs[want].msg_hdr.msg_iovlen = 1;
        want++;
    }
    if (want == 0) {
        if (left > 0 && s->n_free == 0) { /* pool empty: take one packet off and count it */
            ssize_t n = recv(p->fd, s->scratch, cap, MSG_DONTWAIT);
            if (n >= 0) {
                d->head++;
                d->packets++;
                d->pool_drops++;
                return 1;
            }
        }
        return 0;
    }
    int n = recvmmsg(p->fd, msgs, want, MSG_DONTWAIT, NULL);
    if (n < 0)
        n = 0;
    for (int k = 0; k < n; k++) {
        size_t len = msgs[k].msg_len;
        if ((msgs[k].msg_hdr.msg_flags & MSG_TRUNC) || len > s->max_packet) {
            d->head++;
            d->packets++;
            d->oversize++;
            slot_release(s, slots[k]);
            continue;
        }
        s->length[slots[k]] = (uint32_t)len;
        offer(s, in, slots[k], len, now);
    }
    for (unsigned k = (unsigned)n; k < want; k++)
        slot_release(s, slots[k]);
    return n;
}

static int run_loop(Loop *s, double seconds, uint64_t low0, uint64_t low1)
{
    double deadline = mono() + seconds;
    struct pollfd fds[MAX_PORTS];
    for (int i = 0; i < s->n_ports; i++) {
        fds[i].fd = s->ports[i].fd;
        fds[i].events = POLLIN;
    }
    int busy = 1;
    for (;;) {
        double now = mono();
        deliver(s, now);
        if (now >= deadline)
            return 0;
        if (pending_of(s->dir[0]) < low0 || pending_of(s->dir[1]) < low1)
            return 1;
        if (!busy) {
            double wait = deadline - now;
            if (s->heap_n > 0 && s->heap[0].when - now < wait)
                wait = s->heap[0].when - now;
            if (wait < 0)
                wait = 0;
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            int ready = ppoll(fds, (nfds_t)s->n_ports, &ts, NULL);
            if (ready <= 0)
                continue;
        }
        busy = 0;
        now = mono();
        for (int i = 0; i < s->n_ports; i++) {
            if (read_port(s, i, now) > 0)
                busy = 1;
        }
    }
}

/* --- Python surface --- */

static int parse_pair(PyObject *seq, double out[2], const char *what)
{
    if (!PyArg_ParseTuple(seq, "dd", &out[0], &out[1])) {
        PyErr_Format(PyExc_ValueError, "%s must be a pair of numbers (one per direction)", what);
        return -1;
    }
    return 0;
}

static void loop_free(Loop *s)
{
    if (s->pool && s->pool != MAP_FAILED)
        munmap(s->pool, s->pool_bytes);
    s->pool = NULL;
    for (int k = 0; k < 2; k++) {
        PyMem_RawFree(s->dir[k]);
        s->dir[k] = NULL;
    }
    PyMem_RawFree(s->free_list);
    PyMem_RawFree(s->length);
    PyMem_RawFree(s->refs);
    PyMem_RawFree(s->scratch);
    PyMem_RawFree(s->heap);
    s->free_list = s->length = NULL;
    s->refs = s->scratch = NULL;
    s->heap = NULL;
}

static void Loop_dealloc(Loop *s)
{
    loop_free(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Loop_init(Loop *s, PyObject *args, PyObject *kw)
{
    static char *names[] = {"ports", "rates", "delays", "queues", "blackouts", "corrupt_skip",
                            "max_packet", "slots", "late_after", NULL};
    PyObject *ports, *rates, *delays, *queues, *blackouts;
    Py_ssize_t skip, max_packet, slots;
    double late_after;
    if (s->pool != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Loop is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOnnnd", names, &ports, &rates, &delays,
                                     &queues, &blackouts, &skip, &max_packet, &slots, &late_after))
        return -1;
    double r[2], dl[2], q[2];
    if (!PyTuple_Check(rates) || !PyTuple_Check(delays) || !PyTuple_Check(queues)) {
        PyErr_SetString(PyExc_TypeError, "rates, delays and queues must be tuples of two floats");
        return -1;
    }
    if (parse_pair(rates, r, "rates") || parse_pair(delays, dl, "delays") || parse_pair(queues, q, "queues"))
        return -1;
    for (int k = 0; k < 2; k++) {
        if (!(r[k] > 0 && isfinite(r[k])) || !(dl[k] >= 0 && isfinite(dl[k])) || !(q[k] > 0)) {
            value_error(
                         "direction %d: rate must be > 0 bit/s, delay >= 0 s and queue > 0 bytes, "
                         "got %g, %g, %g", k, r[k], dl[k], q[k]);
            return -1;
        }
    }
    if (skip < 0 || max_packet < 1 || max_packet > (1 << 20) || slots < 16 || slots > (1 << 24)
        || !(late_after >= 0)) {
        value_error(
                     "corrupt_skip must be >= 0, max_packet in 1..1048576, slots in 16..16777216 "
                     "and late_after >= 0; got %zd, %zd, %zd, %g", skip, max_packet, slots, late_after);
        return -1;
    }
    PyObject *pseq = PySequence_Fast(ports, "ports must be a sequence of (fd, kind, host, port)");
    if (!pseq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(pseq);
    if (n < 2 || n > MAX_PORTS || n % 2) {
        PyErr_Format(PyExc_ValueError, "ports must be an even number in 2..%d, got %zd", MAX_PORTS, n);
        Py_DECREF(pseq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int fd, kind, port;
        unsigned long host;
        PyObject *item = PySequence_Fast_GET_ITEM(pseq, i);
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "iiki", &fd, &kind, &host, &port)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "port %zd must be (fd, kind, host, port)", i);
            Py_DECREF(pseq);
            return -1;
        }
        if (fd < 0 || (kind != KIND_TUN && kind != KIND_UDP) || host > 0xffffffffUL || port < 0
            || port > 65535) {
            PyErr_Format(PyExc_ValueError,
                         "port %zd: fd must be >= 0, kind 0 (TUN) or 1 (UDP), host an IPv4 "
                         "address as int and port in 0..65535", i);
            Py_DECREF(pseq);
            return -1;
        }
        s->ports[i].fd = fd;
        s->ports[i].kind = kind;
        memset(&s->ports[i].target, 0, sizeof s->ports[i].target);
        s->ports[i].target.sin_family = AF_INET;
        s->ports[i].target.sin_addr.s_addr = htonl((uint32_t)host);
        s->ports[i].target.sin_port = htons((uint16_t)port);
    }
    Py_DECREF(pseq);
    s->n_ports = (int)n;
    for (int k = 0; k < 2; k++) {
        s->dir[k] = PyMem_RawCalloc(1, sizeof(Direction));
        if (!s->dir[k]) {
            loop_free(s);
            PyErr_NoMemory();
            return -1;
        }
        s->dir[k]->rate_bps = r[k];
        s->dir[k]->delay_s = dl[k];
        s->dir[k]->queue_bytes = q[k];
        s->dir[k]->start = NAN;
    }
    PyObject *bseq = PySequence_Fast(blackouts, "blackouts must be two sequences of (start, end)");
    if (!bseq || PySequence_Fast_GET_SIZE(bseq) != 2) {
        if (bseq) {
            PyErr_SetString(PyExc_ValueError, "blackouts must hold one sequence per direction");
            Py_DECREF(bseq);
        }
        loop_free(s);
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        PyObject *wins = PySequence_Fast(PySequence_Fast_GET_ITEM(bseq, k), "blackouts of a direction must be a sequence");
        if (!wins || PySequence_Fast_GET_SIZE(wins) > MAX_BLACKOUTS) {
            if (wins) {
                PyErr_Format(PyExc_ValueError, "at most %d blackouts per direction", MAX_BLACKOUTS);
                Py_DECREF(wins);
            }
            Py_DECREF(bseq);
            loop_free(s);
            return -1;
        }
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(wins); j++) {
            double w[2];
            PyObject *pair = PySequence_Fast_GET_ITEM(wins, j);
            if (!PyTuple_Check(pair) || parse_pair(pair, w, "a blackout") || !(0 <= w[0] && w[0] <= w[1])) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "a blackout must be (start, end) with 0 <= start <= end");
                Py_DECREF(wins);
                Py_DECREF(bseq);
                loop_free(s);
                return -1;
            }
            s->dir[k]->blackout[j][0] = w[0];
            s->dir[k]->blackout[j][1] = w[1];
            s->dir[k]->n_blackouts++;
        }
        Py_DECREF(wins);
    }
    Py_DECREF(bseq);
    s->corrupt_skip = (size_t)skip;
    s->max_packet = (size_t)max_packet;
    s->late_after = late_after;
    s->slot_size = ((size_t)max_packet + 1 + 63) & ~(size_t)63;
    if ((size_t)slots * s->slot_size > MAX_POOL_BYTES)
        slots = (Py_ssize_t)(MAX_POOL_BYTES / s->slot_size);
    s->n_slots = (uint32_t)slots;
    s->pool_bytes = (size_t)s->n_slots * s->slot_size;
    s->pool = mmap(NULL, s->pool_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    s->free_list = PyMem_RawMalloc(sizeof(uint32_t) * s->n_slots);
    s->length = PyMem_RawCalloc(s->n_slots, sizeof(uint32_t));
    s->refs = PyMem_RawCalloc(s->n_slots, 1);
    s->scratch = PyMem_RawMalloc(s->slot_size);
    s->heap_cap = 2 * s->n_slots;
    s->heap = PyMem_RawMalloc(sizeof(Event) * s->heap_cap);
    if (s->pool == MAP_FAILED || !s->free_list || !s->length || !s->refs || !s->scratch || !s->heap) {
        if (s->pool == MAP_FAILED)
            s->pool = NULL;
        loop_free(s);
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t k = 0; k < s->n_slots; k++)
        s->free_list[k] = s->n_slots - 1 - k;
    s->n_free = s->n_slots;
    return 0;
}

static int ready(Loop *s)
{
    if (s->pool == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Loop is not initialised");
        return 0;
    }
    if (s->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Loop.run is in progress in another thread");
        return 0;
    }
    return 1;
}

static int direction_arg(PyObject *arg, int *k)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v != 0 && v != 1) {
        PyErr_Format(PyExc_ValueError, "direction must be 0 (a to b) or 1 (b to a), got %ld", v);
        return -1;
    }
    *k = (int)v;
    return 0;
}

/* A 1-D C-contiguous column of `itemsize` bytes of format `code` ('B' or 'd'). */
static int column(PyObject *obj, Py_buffer *view, char code, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    size_t want = code == 'd' ? sizeof(double) : 1;
    int ok = view->ndim == 1 && (size_t)view->itemsize == want
             && (f[0] == code || (code == 'B' && (f[0] == '?' || f[0] == 'b'))) && f[1] == 0;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D contiguous array of %s", name,
                     code == 'd' ? "float64" : "uint8");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *Loop_feed(Loop *s, PyObject *args)
{
    PyObject *dir_obj, *objs[6];
    static const char *names[6] = {"loss", "extra", "dup", "corrupt", "where", "bit"};
    static const char codes[6] = {'B', 'd', 'B', 'B', 'd', 'B'};
    if (!ready(s) || !PyArg_ParseTuple(args, "OOOOOOO", &dir_obj, &objs[0], &objs[1], &objs[2],
                                       &objs[3], &objs[4], &objs[5]))
        return NULL;
    int k;
    if (direction_arg(dir_obj, &k) < 0)
        return NULL;
    Py_buffer v[6];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 6; held++)
        if (column(objs[held], &v[held], codes[held], names[held]) < 0)
            goto done;
    Py_ssize_t n = v[0].len;
    for (int c = 1; c < 6; c++) {
        if (v[c].shape[0] != n) {
            PyErr_Format(PyExc_ValueError, "%s has %zd entries, loss has %zd: columns must match",
                         names[c], v[c].shape[0], n);
            goto done;
        }
    }
    Direction *d = s->dir[k];
    if ((uint64_t)n > RING - pending_of(d)) {
        PyErr_Format(PyExc_ValueError, "%zd decisions do not fit: room for %llu", n,
                     (unsigned long long)(RING - pending_of(d)));
        goto done;
    }
    const uint8_t *loss = v[0].buf, *dup = v[2].buf, *bad = v[3].buf, *bit = v[5].buf;
    const double *extra = v[1].buf, *where = v[4].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (loss[i] > LOSS_BURST || dup[i] > 1 || bad[i] > 1 || bit[i] > 7) {
            PyErr_Format(PyExc_ValueError,
                         "decision %zd: loss must be 0..2, dup and corrupt 0 or 1, bit 0..7; got "
                         "%u, %u, %u, %u", i, loss[i], dup[i], bad[i], bit[i]);
            goto done;
        }
        if (!(extra[i] >= 0 && isfinite(extra[i])) || !(where[i] >= 0 && where[i] < 1)) {
            PyErr_Format(PyExc_ValueError,
                         "decision %zd: extra must be a finite delay >= 0 s and where in [0, 1); "
                         "got %g, %g", i, extra[i], where[i]);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t j = (uint32_t)((d->tail + (uint64_t)i) & RING_MASK);
        d->loss[j] = loss[i];
        d->extra[j] = extra[i];
        d->dup[j] = dup[i];
        d->bad[j] = bad[i];
        d->where[j] = where[i];
        d->bit[j] = bit[i];
    }
    d->tail += (uint64_t)n;
    result = PyLong_FromSsize_t(n);
done:
    for (int c = 0; c < held; c++)
        PyBuffer_Release(&v[c]);
    return result;
}

static PyObject *Loop_run(Loop *s, PyObject *args)
{
    double seconds;
    unsigned long long low0 = LOW_WATER, low1 = LOW_WATER;
    if (!PyArg_ParseTuple(args, "d|KK", &seconds, &low0, &low1))
        return NULL;
    if (!(seconds >= 0 && seconds <= 3600) || low0 > RING || low1 > RING) {
        value_error(
                     "run(seconds, low0, low1): seconds must be in [0, 3600] and the low "
                     "marks in 0..%u, got %g, %llu, %llu", RING, seconds, low0, low1);
        return NULL;
    }
    if (!ready(s))
        return NULL;
    s->busy = 1;
    int why;
    Py_BEGIN_ALLOW_THREADS
    why = run_loop(s, seconds, low0, low1);
    Py_END_ALLOW_THREADS
    s->busy = 0;
    return PyLong_FromLong(why);
}

static PyObject *Loop_pending(Loop *s, PyObject *arg)
{
    int k;
    if (!ready(s) || direction_arg(arg, &k) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(pending_of(s->dir[k]));
}

static PyObject *Loop_room(Loop *s, PyObject *arg)
{
    int k;
    if (!ready(s) || direction_arg(arg, &k) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(RING - pending_of(s->dir[k]));
}

static PyObject *Loop_stats(Loop *s, PyObject *arg)
{
    int k;
    if (!ready(s) || direction_arg(arg, &k) < 0)
        return NULL;
    Direction *d = s->dir[k];
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsdsdsIsI}", "packets", d->packets, "bytes", d->bytes,
        "delivered", d->delivered, "queue_drops", d->queue_drops, "loss_random", d->loss_random,
        "loss_burst", d->loss_burst, "blackout_drops", d->blackout_drops, "duplicated",
        d->duplicated, "reordered", d->reordered, "corrupted", d->corrupted, "forwarded",
        d->forwarded, "write_errors", d->write_errors, "pool_drops", d->pool_drops, "oversize",
        d->oversize, "late", d->late, "max_backlog_bytes", d->max_backlog_bytes, "max_lateness_s",
        d->max_lateness_s, "in_flight", s->heap_n, "slots", s->n_slots);
}

static PyMethodDef Loop_methods[] = {
    {"feed", (PyCFunction)Loop_feed, METH_VARARGS,
     "feed(direction, loss, extra, dup, corrupt, where, bit): queue decisions for the next "
     "offered packets (uint8, float64 s, uint8, uint8, float64 in [0, 1), uint8 0..7)."},
    {"run", (PyCFunction)Loop_run, METH_VARARGS,
     "run(seconds, low0=LOW_WATER, low1=LOW_WATER) -> 0 when the time is up, 1 as soon as "
     "direction k has fewer than low_k decisions left."},
    {"pending", (PyCFunction)Loop_pending, METH_O, "Decisions queued for a direction."},
    {"room", (PyCFunction)Loop_room, METH_O, "Decisions a direction can still take."},
    {"stats", (PyCFunction)Loop_stats, METH_O, "A direction's counters as a dict."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LoopType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sdr.backends.wan._forward.Loop",
    .tp_basicsize = sizeof(Loop),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The native forwarding loop (see the module docstring).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loop_init,
    .tp_dealloc = (destructor)Loop_dealloc,
    .tp_methods = Loop_methods,
};

static struct PyModuleDef forward_module = {
    PyModuleDef_HEAD_INIT, "sdr.backends.wan._forward",
    "The WAN emulator's native forwarding loop (see sdr.backends.wan.native_forwarder).", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__forward(void)
{
    if (PyType_Ready(&LoopType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&forward_module);
    if (!m)
        return NULL;
    Py_INCREF(&LoopType);
    if (PyModule_AddObject(m, "Loop", (PyObject *)&LoopType) < 0) {
        Py_DECREF(&LoopType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "RING", RING);
    PyModule_AddIntConstant(m, "LOW_WATER", LOW_WATER);
    PyModule_AddIntConstant(m, "KIND_TUN", KIND_TUN);
    PyModule_AddIntConstant(m, "KIND_UDP", KIND_UDP);
    return m;
}
