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
 *        late_after, coalesce=True)   # coalesce: merge due runs into GSO writes (kind 2)
 *   loop.feed(direction, loss, extra, dup, corrupt, where, bit)   # decision columns
 *   loop.run(seconds, low0, low1) -> 0 (time is up) | 1 (direction k has < low_k left)
 *   loop.pending(direction), loop.room(direction), loop.stats(direction) -> dict
 *
 * A port is (fd, kind, ipv4 host as int, udp port): kind 0 is a TUN device (one packet
 * per read/write), kind 1 a UDP socket (recvmmsg; sendto the target), kind 2 a TUN device
 * opened with IFF_VNET_HDR and offloads (TUNSETOFFLOAD): every read and write carries a
 * virtio_net_hdr, a read may be a GSO super-packet (TCP or UDP, up to 64 KiB), which is
 * cut here into the wire packets the kernel would have sent (each meets the link on its
 * own, one decision each), and a write may be a run of due wire packets of one flow merged
 * back into one super-packet where GRO would have merged them. Ports come in couples: an
 * even index is an a side, a packet read on port i leaves through port i ^ 1, and what
 * the even ports read goes through direction 0 (a to b).
 *
 * run() releases the GIL; no Python object is touched per packet. Every length is checked
 * against the slot before a read lands there, every decision index is masked into its
 * ring, and feed() validates every column (type, length, range) before copying any. A
 * virtio header and the IP/TCP/UDP headers behind it are checked whole (every length and
 * offset against what was read) before a byte of a segment is written.
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
#include <sys/uio.h>
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

#define MAX_SEGS 64               /* wire packets per GSO packet (the devices' gso_max_segs) */
#define GSO_BYTES 65536u          /* the largest packet a TUN device hands over */

enum { KIND_TUN = 0, KIND_UDP = 1, KIND_TUN_VNET = 2 };

/* The virtio net header in front of every packet of a TUN device with IFF_VNET_HDR (the
 * virtio spec's legacy layout, 10 bytes, native byte order: TUNSETVNETHDRSZ and
 * TUNSETVNETLE are left unset). The constants are the spec's. */
typedef struct {
    uint8_t flags, gso_type;
    uint16_t hdr_len, gso_size, csum_start, csum_offset;
} VnetHdr;
#define VNET_HDR 10
_Static_assert(sizeof(VnetHdr) == VNET_HDR, "virtio_net_hdr is 10 bytes");
#define VNET_NEEDS_CSUM 1
#define GSO_NONE 0
#define GSO_TCPV4 1
#define GSO_TCPV6 4
#define GSO_UDP_L4 5
#define TCP_FIN 0x01
#define TCP_PSH 0x08
#define TCP_ACK 0x10
#define TCP_CWR 0x80

/* What a slot's packet needs at the write: its L4 checksum left to finish (partial, as the
 * kernel handed it over with VIRTIO_NET_HDR_F_NEEDS_CSUM), and whether its headers were
 * parsed (merge: IPv4/IPv6 + TCP/UDP, checksum at the L4 header) so it may join a run. */
typedef struct {
    uint16_t csum_start, csum_offset;
    uint8_t partial, merge, proto, v6, l4, hdr;
} Meta;

/* The headers of one IP packet: L4 offset, all headers, the bytes past them. */
typedef struct {
    size_t l4, hdr, payload, gso;
    unsigned segs;
    uint8_t proto, v6;
} L34;
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
        duplicated, reordered, corrupted, forwarded, write_errors, pool_drops, oversize, late,
        malformed, gso_in, gso_out;
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
    Meta *meta;
    uint8_t *refs;
    uint8_t *rx; /* a GSO packet read from a vnet port, whole (max(slot, 64 KiB) bytes) */
    size_t rx_size;
    uint8_t *scratch; /* where packets go that find the pool empty */
    Event *heap;
    uint32_t heap_n, heap_cap;
    uint64_t seq;
    size_t corrupt_skip, max_packet;
    double late_after;
    int busy, coalesce;
    uint64_t need[2]; /* decisions a read needs: MAX_SEGS where vnet ports feed the direction */
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

/* --- IP/TCP/UDP headers and checksums (RFC 791, 793, 768, 8200; RFC 1071's sum) --- */

static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }
static inline void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v); }

/* The ones' complement sum of `n` bytes as big-endian 16-bit words (an odd last byte is
 * padded with zero), added to `acc`; fold() takes it to 16 bits. */
static uint64_t sum16(const uint8_t *p, size_t n, uint64_t acc)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        acc += get32(p + i);
    for (; i + 2 <= n; i += 2)
        acc += get16(p + i);
    if (i < n)
        acc += (uint32_t)p[i] << 8;
    return acc;
}

static uint16_t fold(uint64_t acc)
{
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return (uint16_t)acc;
}

/* The pseudo-header sum (addresses, protocol, L4 length) folded, not complemented: what a
 * partial checksum field holds before the device finishes it. */
static uint16_t pseudo_sum(const uint8_t *ip, int v6, uint8_t proto, size_t l4len)
{
    uint64_t acc = v6 ? sum16(ip + 8, 32, 0) : sum16(ip + 12, 8, 0);
    return fold(acc + proto + l4len);
}

/* IPv4/IPv6 with TCP or UDP right behind: 0 and the headers in *g, or -1 (anything else,
 * or lengths that disagree with the `len` bytes read). Reads nothing at or past len. */
static int parse_l34(const uint8_t *p, size_t len, L34 *g)
{
    if (len < 1)
        return -1;
    if (p[0] >> 4 == 4) {
        size_t ihl = (size_t)(p[0] & 15u) * 4u;
        if (len < 20 || ihl < 20 || ihl > len || get16(p + 2) != len || (get16(p + 6) & 0x3fff))
            return -1; /* short, lengths off, or a fragment (MF or an offset) */
        g->v6 = 0;
        g->proto = p[9];
        g->l4 = ihl;
    } else if (p[0] >> 4 == 6) {
        if (len < 40 || (size_t)get16(p + 4) + 40u != len)
            return -1;
        g->v6 = 1;
        g->proto = p[6]; /* extension headers are not parsed: not TCP or UDP then */
        g->l4 = 40;
    } else {
        return -1;
    }
    size_t l4h;
    if (g->proto == IPPROTO_TCP) {
        if (g->l4 + 20 > len)
            return -1;
        l4h = (size_t)(p[g->l4 + 12] >> 4) * 4u;
        if (l4h < 20)
            return -1;
    } else if (g->proto == IPPROTO_UDP) {
        l4h = 8;
    } else {
        return -1;
    }
    if (g->l4 + l4h > len)
        return -1;
    if (g->proto == IPPROTO_UDP && get16(p + g->l4 + 4) != len - g->l4)
        return -1;
    g->hdr = g->l4 + l4h;
    g->payload = len - g->hdr;
    return 0;
}

enum { READ_OK = 0, READ_MALFORMED = 1, READ_OVERSIZE = 2 };

/* A GSO packet of `len` bytes and its virtio header: READ_OK with the segments in *g, or
 * why not. The header must agree with the packet (type, checksum position) and every
 * segment must fit a slot. */
static int parse_gso(const VnetHdr *h, const uint8_t *p, size_t len, size_t max_packet, L34 *g)
{
    if (!(h->flags & VNET_NEEDS_CSUM) || parse_l34(p, len, g) < 0)
        return READ_MALFORMED;
    int tcp = g->proto == IPPROTO_TCP;
    int want = g->v6 ? (tcp ? GSO_TCPV6 : GSO_UDP_L4) : (tcp ? GSO_TCPV4 : GSO_UDP_L4);
    if (h->gso_type != want || h->csum_start != g->l4 || h->csum_offset != (tcp ? 16 : 6)
        || h->gso_size == 0 || g->payload == 0)
        return READ_MALFORMED;
    g->gso = h->gso_size;
    size_t segs = (g->payload + g->gso - 1) / g->gso;
    size_t first = g->payload < g->gso ? g->payload : g->gso;
    if (segs > MAX_SEGS || g->hdr + first > max_packet)
        return READ_OVERSIZE;
    g->segs = (unsigned)segs;
    return READ_OK;
}

/* Headers at p (g->hdr bytes) made those of a packet with `payload` bytes behind them:
 * lengths, the IPv4 header checksum, the L4 checksum left partial (the pseudo-header sum,
 * as the kernel leaves it for a device that checksums). */
static void set_lengths(uint8_t *p, const L34 *g, size_t payload)
{
    size_t l4len = g->hdr - g->l4 + payload;
    if (g->v6) {
        put16(p + 4, l4len);
    } else {
        put16(p + 2, g->hdr + payload);
        put16(p + 10, 0);
        put16(p + 10, (uint16_t)~fold(sum16(p, g->l4, 0)));
    }
    uint8_t *l4 = p + g->l4;
    if (g->proto == IPPROTO_UDP)
        put16(l4 + 4, l4len);
    put16(l4 + (g->proto == IPPROTO_UDP ? 6 : 16), pseudo_sum(p, g->v6, g->proto, l4len));
}

/* Segment k (`payload` bytes) of a GSO packet: what the kernel's TSO/USO writes into each
 * one (IPv4 ID + k, TCP sequence + k * gso_size, FIN and PSH on the last segment only, CWR
 * on the first only). p holds a copy of the super-packet's headers. */
static void segment_headers(uint8_t *p, const L34 *g, unsigned k, size_t payload)
{
    if (!g->v6)
        put16(p + 4, get16(p + 4) + k);
    if (g->proto == IPPROTO_TCP) {
        uint8_t *th = p + g->l4;
        put32(th + 4, get32(th + 4) + (uint32_t)(k * g->gso));
        if (k + 1 < g->segs)
            th[13] &= (uint8_t)~(TCP_FIN | TCP_PSH);
        if (k > 0)
            th[13] &= (uint8_t)~TCP_CWR;
    }
    set_lengths(p, g, payload);
}

static Meta meta_of(const L34 *g)
{
    Meta m = {(uint16_t)g->l4, (uint16_t)(g->proto == IPPROTO_TCP ? 16 : 6), 1, 1, g->proto,
              g->v6, (uint8_t)g->l4, (uint8_t)g->hdr};
    return m;
}

/* Finish a partial L4 checksum in place (what the device would do), for a packet that is
 * corrupted next or leaves through a port without offloads. The read checked the span. */
static void finish_csum(Loop *s, uint32_t slot)
{
    Meta *m = &s->meta[slot];
    if (!m->partial)
        return;
    uint8_t *p = slot_at(s, slot);
    size_t len = s->length[slot], at = (size_t)m->csum_start + m->csum_offset;
    if (at + 2 <= len) {
        uint16_t c = (uint16_t)~fold(sum16(p + m->csum_start, len - m->csum_start, 0));
        put16(p + at, c ? c : 0xffff);
    }
    m->partial = m->merge = 0;
}

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
        finish_csum(s, slot); /* the sender's checksum covers the bytes before the flip */
        s->meta[slot].merge = 0;
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

/* Whether the packet in slot c may join the run (same flow, right behind its last packet,
 * as GRO would merge them): equal headers but lengths, checksums, IPv4 ID (+1 per packet)
 * and TCP sequence (contiguous); payloads of the first's size, the last one may be
 * shorter; TCP with ACK only, PSH or FIN on the last; at most 64 KiB in all. */
static int joins(Loop *s, const Event *run, unsigned n, uint32_t c, size_t total)
{
    const Meta *f = &s->meta[run[0].slot], *m = &s->meta[c];
    if (!m->merge || m->proto != f->proto || m->v6 != f->v6 || m->hdr != f->hdr)
        return 0;
    const uint8_t *a = slot_at(s, run[0].slot), *b = slot_at(s, c), *q = slot_at(s, run[n - 1].slot);
    size_t seg = s->length[run[0].slot] - f->hdr, prev = s->length[run[n - 1].slot] - f->hdr;
    size_t mine = s->length[c] - f->hdr;
    if (prev != seg || mine == 0 || mine > seg || f->hdr + total + mine > 65535)
        return 0;
    if (f->v6) {
        if (memcmp(a, b, 4) || memcmp(a + 6, b + 6, 34))
            return 0;
    } else if (a[0] != b[0] || a[1] != b[1] || memcmp(a + 6, b + 6, 4)
               || memcmp(a + 12, b + 12, (size_t)f->l4 - 12)
               || (uint16_t)(get16(a + 4) + n) != get16(b + 4)) {
        return 0;
    }
    const uint8_t *ta = a + f->l4, *tb = b + f->l4, *tq = q + f->l4;
    if (memcmp(ta, tb, 4))
        return 0; /* ports */
    if (f->proto == IPPROTO_UDP)
        return 1;
    if (memcmp(ta + 8, tb + 8, 5) || memcmp(ta + 14, tb + 14, 2)
        || memcmp(ta + 18, tb + 18, (size_t)f->hdr - f->l4 - 18))
        return 0; /* ack, header length, window, urgent pointer, options */
    if (tq[13] != TCP_ACK || (tb[13] & (uint8_t)~(TCP_PSH | TCP_FIN)) != TCP_ACK)
        return 0;
    return get32(tb + 4) == get32(tq + 4) + (uint32_t)prev;
}

/* Write one packet, or a run of them merged into one GSO packet, to a vnet port. */
static ssize_t write_vnet(Loop *s, int fd, const Event *run, unsigned n)
{
    const Meta *f = &s->meta[run[0].slot];
    uint8_t *first = slot_at(s, run[0].slot);
    VnetHdr h = {0, GSO_NONE, 0, 0, 0, 0};
    struct iovec iov[MAX_SEGS + 2];
    iov[0].iov_base = &h;
    iov[0].iov_len = VNET_HDR;
    if (f->partial) {
        h.flags = VNET_NEEDS_CSUM;
        h.csum_start = f->csum_start;
        h.csum_offset = f->csum_offset;
    }
    if (n == 1) {
        iov[1].iov_base = first;
        iov[1].iov_len = s->length[run[0].slot];
        return writev(fd, iov, 2);
    }
    uint8_t head[256];
    L34 g = {f->l4, f->hdr, 0, 0, n, f->proto, f->v6};
    size_t total = 0;
    for (unsigned k = 0; k < n; k++) {
        size_t payload = s->length[run[k].slot] - f->hdr;
        iov[2 + k].iov_base = slot_at(s, run[k].slot) + f->hdr;
        iov[2 + k].iov_len = payload;
        total += payload;
    }
    memcpy(head, first, f->hdr);
    if (f->proto == IPPROTO_TCP)
        head[f->l4 + 13] = slot_at(s, run[n - 1].slot)[f->l4 + 13]; /* the last one's PSH/FIN */
    set_lengths(head, &g, total);
    h.gso_type = f->proto == IPPROTO_UDP ? GSO_UDP_L4 : (f->v6 ? GSO_TCPV6 : GSO_TCPV4);
    h.hdr_len = f->hdr;
    h.gso_size = (uint16_t)(s->length[run[0].slot] - f->hdr);
    iov[1].iov_base = head;
    iov[1].iov_len = f->hdr;
    return writev(fd, iov, (int)n + 2);
}

/* Due events that leave together with run[0]: 1 unless run[0] goes to a vnet port. */
static unsigned gather(Loop *s, Event *run, double now)
{
    unsigned n = 1;
    if (!s->coalesce || s->ports[run[0].out].kind != KIND_TUN_VNET || !s->meta[run[0].slot].merge)
        return n;
    size_t total = s->length[run[0].slot] - s->meta[run[0].slot].hdr;
    while (n < MAX_SEGS && s->heap_n > 0 && s->heap[0].when <= now && s->heap[0].out == run[0].out
           && joins(s, run, n, s->heap[0].slot, total)) {
        run[n] = heap_pop(s);
        total += s->length[run[n].slot] - s->meta[run[n].slot].hdr;
        n++;
    }
    return n;
}

static void deliver(Loop *s, double now)
{
    while (s->heap_n > 0 && s->heap[0].when <= now) {
        Event run[MAX_SEGS];
        run[0] = heap_pop(s);
        unsigned n = gather(s, run, now);
        Port *p = &s->ports[run[0].out];
        Direction *d = s->dir[(run[0].out ^ 1u) & 1u];
        uint32_t len = s->length[run[0].slot];
        const uint8_t *buf = slot_at(s, run[0].slot);
        ssize_t written;
        if (p->kind == KIND_TUN_VNET) {
            written = write_vnet(s, p->fd, run, n);
        } else {
            finish_csum(s, run[0].slot); /* no device behind to finish it */
            if (p->kind == KIND_TUN)
                written = write(p->fd, buf, len);
            else
                written = sendto(p->fd, buf, len, 0, (const struct sockaddr *)&p->target,
                                 sizeof p->target);
        }
        if (n > 1 && written >= 0)
            d->gso_out++;
        double after = mono(); /* lateness: how long after its time the copy was written */
        for (unsigned k = 0; k < n; k++) {
            if (written < 0)
                d->write_errors++; /* queue full or interface gone: lost, as on a wire */
            else
                d->forwarded++;
            double late = after - run[k].when;
            if (late > d->max_lateness_s)
                d->max_lateness_s = late;
            if (late > s->late_after)
                d->late++;
            slot_release(s, run[k].slot);
        }
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

/* A read that never became a packet (too long, malformed, no slot): it was offered, so
 * it uses up one decision, and is counted by why. */
static void drop_read(Loop *s, Direction *d, uint32_t slot, uint64_t *counter)
{
    d->head++;
    d->packets++;
    (*counter)++;
    slot_release(s, slot);
}

/* A GSO packet (whole in s->rx, its first bytes also in `slot`) cut into its wire packets,
 * each offered to the link on its own. read_vnet made sure of MAX_SEGS decisions. */
static void offer_segments(Loop *s, int in, uint32_t slot, const L34 *g, double now)
{
    Direction *d = s->dir[in & 1];
    const uint8_t *pkt = s->rx;
    d->gso_in++;
    for (unsigned k = 0; k < g->segs; k++) {
        size_t off = (size_t)k * g->gso, left = g->payload - off;
        size_t payload = left < g->gso ? left : g->gso;
        uint32_t t = k == 0 ? slot : slot_take(s);
        if (t == UINT32_MAX) {
            drop_read(s, d, t, &d->pool_drops);
            continue;
        }
        uint8_t *dst = slot_at(s, t); /* hdr + payload <= max_packet: parse_gso checked */
        memcpy(dst, pkt, g->hdr);
        memcpy(dst + g->hdr, pkt + g->hdr + off, payload);
        segment_headers(dst, g, k, payload);
        s->length[t] = (uint32_t)(g->hdr + payload);
        s->meta[t] = meta_of(g);
        offer(s, in, t, g->hdr + payload, now);
    }
}

/* One packet (no GSO) of `len` bytes in `slot` and its virtio header: its checksum state
 * (a partial checksum's span must lie inside the packet), or -1 (malformed). */
static int single_meta(const VnetHdr *h, const uint8_t *p, size_t len, Meta *m)
{
    memset(m, 0, sizeof *m);
    if (!(h->flags & VNET_NEEDS_CSUM))
        return 0;
    if ((size_t)h->csum_start + h->csum_offset + 2 > len)
        return -1;
    L34 g;
    if (parse_l34(p, len, &g) == 0 && h->csum_start == g.l4
        && h->csum_offset == (g.proto == IPPROTO_TCP ? 16 : 6)) {
        *m = meta_of(&g);
        return 0;
    }
    m->csum_start = h->csum_start;
    m->csum_offset = h->csum_offset;
    m->partial = 1;
    return 0;
}

/* Read up to BURST packets from a vnet TUN port: each read is a virtio header and a packet
 * or a GSO packet of up to 64 KiB; the first max_packet + 1 bytes land in a slot, the rest
 * in s->rx. Only while MAX_SEGS decisions are left, so every segment has its own. */
static int read_vnet(Loop *s, int in)
{
    Port *p = &s->ports[in];
    Direction *d = s->dir[in & 1];
    size_t cap = s->max_packet + 1;
    int got = 0;
    while (got < BURST && pending_of(d) >= MAX_SEGS) {
        uint32_t slot = slot_take(s);
        uint8_t *buf = slot == UINT32_MAX ? s->scratch : slot_at(s, slot);
        VnetHdr h;
        struct iovec iov[3] = {{&h, VNET_HDR}, {buf, cap}, {s->rx + cap, s->rx_size - cap}};
        ssize_t n = readv(p->fd, iov, s->rx_size > cap ? 3 : 2);
        if (n < 0) {
            slot_release(s, slot);
            break;
        }
        double now = mono(); /* the packet was waiting by now: never stamped before it came */
        got++;
        if (slot == UINT32_MAX) {
            drop_read(s, d, slot, &d->pool_drops);
            continue;
        }
        if (n < VNET_HDR) {
            drop_read(s, d, slot, &d->malformed);
            continue;
        }
        size_t len = (size_t)n - VNET_HDR;
        if (h.gso_type == GSO_NONE) {
            if (len > s->max_packet) {
                drop_read(s, d, slot, &d->oversize);
            } else if (single_meta(&h, buf, len, &s->meta[slot]) < 0) {
                drop_read(s, d, slot, &d->malformed);
            } else {
                s->length[slot] = (uint32_t)len;
                offer(s, in, slot, len, now);
            }
            continue;
        }
        L34 g;
        memcpy(s->rx, buf, len < cap ? len : cap); /* the packet whole in rx */
        int why = parse_gso(&h, s->rx, len, s->max_packet, &g);
        if (why != READ_OK)
            drop_read(s, d, slot, why == READ_OVERSIZE ? &d->oversize : &d->malformed);
        else
            offer_segments(s, in, slot, &g, now);
    }
    return got;
}

/* Read up to BURST packets from port `in`; returns how many were read (0: none waiting).
 * Each packet's arrival is the clock read after the call that returned it: a stamp taken
 * before the read would predate packets that came while the loop was descheduled, and
 * they would leave early (less than the set delay after they were sent). */
static int read_port(Loop *s, int in)
{
    Port *p = &s->ports[in];
    Direction *d = s->dir[in & 1];
    size_t cap = s->max_packet + 1; /* one byte more than allowed: a full read is oversize */
    int got = 0;
    if (p->kind == KIND_TUN_VNET)
        return read_vnet(s, in);
    if (p->kind == KIND_TUN) {
        while (got < BURST && pending_of(d) > 0) {
            uint32_t slot = slot_take(s);
            uint8_t *buf = slot == UINT32_MAX ? s->scratch : slot_at(s, slot);
            ssize_t n = read(p->fd, buf, cap);
            if (n < 0) {
                slot_release(s, slot);
                break;
            }
            double now = mono();
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
            memset(&s->meta[slot], 0, sizeof(Meta));
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
    double now = mono();
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
        memset(&s->meta[slots[k]], 0, sizeof(Meta));
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
        if (pending_of(s->dir[0]) < (low0 > s->need[0] ? low0 : s->need[0])
            || pending_of(s->dir[1]) < (low1 > s->need[1] ? low1 : s->need[1]))
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
        for (int i = 0; i < s->n_ports; i++) {
            if (read_port(s, i) > 0)
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
    PyMem_RawFree(s->meta);
    PyMem_RawFree(s->rx);
    PyMem_RawFree(s->refs);
    PyMem_RawFree(s->scratch);
    PyMem_RawFree(s->heap);
    s->free_list = s->length = NULL;
    s->meta = NULL;
    s->refs = s->scratch = s->rx = NULL;
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
                            "max_packet", "slots", "late_after", "coalesce", NULL};
    PyObject *ports, *rates, *delays, *queues, *blackouts;
    Py_ssize_t skip, max_packet, slots;
    double late_after;
    int coalesce = 1;
    if (s->pool != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Loop is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOnnnd|p", names, &ports, &rates, &delays,
                                     &queues, &blackouts, &skip, &max_packet, &slots, &late_after,
                                     &coalesce))
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
        if (fd < 0 || kind < KIND_TUN || kind > KIND_TUN_VNET || host > 0xffffffffUL || port < 0
            || port > 65535) {
            PyErr_Format(PyExc_ValueError,
                         "port %zd: fd must be >= 0, kind 0 (TUN), 1 (UDP) or 2 (TUN with "
                         "IFF_VNET_HDR), host an IPv4 address as int and port in 0..65535", i);
            Py_DECREF(pseq);
            return -1;
        }
        s->ports[i].fd = fd;
        s->ports[i].kind = kind;
        memset(&s->ports[i].target, 0, sizeof s->ports[i].target);
        s->ports[i].target.sin_family = AF_INET;
        s->ports[i].target.sin_addr.s_addr = htonl((uint32_t)host);
        s->ports[i].target.sin_port = htons((uint16_t)port);
        if (kind == KIND_TUN_VNET)
            s->need[i & 1] = MAX_SEGS;
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
    s->coalesce = coalesce;
    s->slot_size = ((size_t)max_packet + 1 + 63) & ~(size_t)63;
    if ((size_t)slots * s->slot_size > MAX_POOL_BYTES)
        slots = (Py_ssize_t)(MAX_POOL_BYTES / s->slot_size);
    s->n_slots = (uint32_t)slots;
    s->pool_bytes = (size_t)s->n_slots * s->slot_size;
    s->pool = mmap(NULL, s->pool_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    s->free_list = PyMem_RawMalloc(sizeof(uint32_t) * s->n_slots);
    s->length = PyMem_RawCalloc(s->n_slots, sizeof(uint32_t));
    s->meta = PyMem_RawCalloc(s->n_slots, sizeof(Meta));
    s->rx_size = (size_t)max_packet + 1 > GSO_BYTES ? (size_t)max_packet + 1 : GSO_BYTES + 1;
    s->rx = PyMem_RawMalloc(s->rx_size);
    s->refs = PyMem_RawCalloc(s->n_slots, 1);
    s->scratch = PyMem_RawMalloc(s->slot_size);
    s->heap_cap = 2 * s->n_slots;
    s->heap = PyMem_RawMalloc(sizeof(Event) * s->heap_cap);
    if (s->pool == MAP_FAILED || !s->free_list || !s->length || !s->meta || !s->rx || !s->refs
        || !s->scratch || !s->heap) {
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
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsdsdsIsI}", "packets", d->packets, "bytes", d->bytes,
        "delivered", d->delivered, "queue_drops", d->queue_drops, "loss_random", d->loss_random,
        "loss_burst", d->loss_burst, "blackout_drops", d->blackout_drops, "duplicated",
        d->duplicated, "reordered", d->reordered, "corrupted", d->corrupted, "forwarded",
        d->forwarded, "write_errors", d->write_errors, "pool_drops", d->pool_drops, "oversize",
        d->oversize, "late", d->late, "malformed", d->malformed, "gso_in", d->gso_in, "gso_out",
        d->gso_out, "max_backlog_bytes", d->max_backlog_bytes, "max_lateness_s",
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
    PyModule_AddIntConstant(m, "KIND_TUN_VNET", KIND_TUN_VNET);
    PyModule_AddIntConstant(m, "MAX_SEGS", MAX_SEGS);
    PyModule_AddIntConstant(m, "VNET_HDR", VNET_HDR);
    return m;
}
