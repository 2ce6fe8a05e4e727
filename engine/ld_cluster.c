/* ld_cluster.c - the control plane of a cluster: rendezvous with mutual
   HMAC authentication, signed messages, heartbeats, lost peers, and the ZAP
   handler that guards the ring. See ld_cluster.h for the protocol. */
#include "ld_cluster_int.h"
#include "ld_core.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <zmq.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "LDIST/1"
#define MAX_PENDING 64
#define MAX_FRAMES 8
#define MAX_CTL_MSG (1 << 30)       /* bytes: refuse anything larger on the control socket */

/* ================================================================ small helpers */
double cl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void (*log_fn)(void *, const char *);
static void *log_ud;
void ld_cluster_set_log(void (*fn)(void *ud, const char *line), void *ud) { log_fn = fn; log_ud = ud; }

void cl_log(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_fn) log_fn(log_ud, line);
    else { fprintf(stderr, "ldist cluster: %s\n", line); fflush(stderr); }
}

int ld_random_bytes(void *buf, size_t n) {
    unsigned char *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return ld_fail(LD_EIO, "getrandom: %s", strerror(errno));
        }
        p += r; n -= (size_t)r;
    }
    return LD_OK;
}

static void to_hex(const unsigned char *b, size_t n, char *out) {
    static const char h[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) { out[2 * i] = h[b[i] >> 4]; out[2 * i + 1] = h[b[i] & 15]; }
    out[2 * n] = 0;
}
static int from_hex(const char *s, unsigned char *out, size_t n) {
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = s[2 * i + k];
            int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
            if (d < 0) return -1;
            v = v * 16 + d;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* HMAC-SHA256 over the concatenation of parts (OpenSSL 3's EVP_MAC). */
typedef struct { const void *p; size_t n; } part;
static EVP_MAC *hmac_alg;
static void hmac_fetch(void) { hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL); }
static int hmac(const void *key, size_t klen, const part *parts, int np, unsigned char out[32]) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, hmac_fetch);
    if (!hmac_alg) return -1;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac_alg);
    if (!ctx) return -1;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    int ok = EVP_MAC_init(ctx, key, klen, params);
    for (int i = 0; ok && i < np; i++) ok = EVP_MAC_update(ctx, parts[i].p, parts[i].n);
    size_t len = 0;
    if (ok) ok = EVP_MAC_final(ctx, out, &len, 32);
    EVP_MAC_CTX_free(ctx);
    return ok && len == 32 ? 0 : -1;
}

static void put_be64(unsigned char *b, uint64_t v) { for (int i = 7; i >= 0; i--) { b[i] = (unsigned char)v; v >>= 8; } }
static uint64_t get_be64(const unsigned char *b) { uint64_t v = 0; for (int i = 0; i < 8; i++) v = v << 8 | b[i]; return v; }

/* value of "key=" in a body of "key=value\n" lines, copied into out; -1 if absent or too long */
static int kv_get(const char *body, size_t n, const char *key, char *out, size_t outn) {
    size_t kl = strlen(key);
    size_t i = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && body[e] != '\n') e++;
        if (e - i > kl && !memcmp(body + i, key, kl) && body[i + kl] == '=') {
            size_t vl = e - i - kl - 1;
            if (vl >= outn) return -1;
            memcpy(out, body + i + kl + 1, vl);
            out[vl] = 0;
            for (size_t q = 0; q < vl; q++) if (out[q] == 0) return -1;
            return 0;
        }
        i = e + 1;
    }
    return -1;
}
static int kv_int(const char *body, size_t n, const char *key, long lo, long hi, long *v) {
    char buf[32], *end;
    if (kv_get(body, n, key, buf, sizeof buf)) return -1;
    errno = 0;
    long x = strtol(buf, &end, 10);
    if (errno || end == buf || *end || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

/* printable copy of untrusted bytes, for log lines (truncated with "...") */
static void printable(const void *p, size_t n, char *out, size_t outn) {
    const unsigned char *s = p;
    size_t k = 0, i = 0;
    for (; i < n && k + 8 < outn; i++) {
        if (s[i] >= 32 && s[i] < 127) out[k++] = (char)s[i];
        else k += (size_t)snprintf(out + k, outn - k, "\\x%02x", s[i]);
    }
    if (i < n && k + 4 <= outn) { memcpy(out + k, "...", 3); k += 3; }
    out[k] = 0;
}

/* ================================================================ frames */
typedef struct { zmq_msg_t m[MAX_FRAMES]; int n; int too_many; } frames;

static void frames_close(frames *f) { for (int i = 0; i < f->n; i++) zmq_msg_close(&f->m[i]); f->n = 0; }

/* one whole multipart message (DONTWAIT); -1 when none */
static int frames_recv(void *sock, frames *f) {
    f->n = 0; f->too_many = 0;
    for (;;) {
        zmq_msg_t tmp, *m = f->n < MAX_FRAMES ? &f->m[f->n] : &tmp;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, sock, f->n ? 0 : ZMQ_DONTWAIT) < 0) { zmq_msg_close(m); if (f->n == 0) return -1; break; }
        int more = zmq_msg_more(m);
        if (m == &tmp) { zmq_msg_close(m); f->too_many = 1; }
        else f->n++;
        if (!more) break;
    }
    return 0;
}
static const void *fd_(frames *f, int i) { return zmq_msg_data(&f->m[i]); }
static size_t fl_(frames *f, int i) { return zmq_msg_size(&f->m[i]); }
static int frame_is(frames *f, int i, const char *s) { size_t n = strlen(s); return fl_(f, i) == n && !memcmp(fd_(f, i), s, n); }

/* [ident] MAGIC type seq body mac: seq and mac only under a session key */
static int send_ctl(void *sock, const void *ident, size_t ident_len, const char *type, const void *body, size_t blen,
                    const unsigned char *key, uint64_t seq) {
    unsigned char seqb[8], mac[32];
    size_t maclen = 0;
    put_be64(seqb, seq);
    if (key) {
        part ps[3] = {{type, strlen(type) + 1}, {seqb, 8}, {body, blen}};
        if (hmac(key, 32, ps, 3, mac)) return -1;
        maclen = 32;
    }
    int rc = 0;
    if (ident) rc |= zmq_send(sock, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0;
    rc |= zmq_send(sock, MAGIC, strlen(MAGIC), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0;
    rc |= zmq_send(sock, type, strlen(type), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0;
    rc |= zmq_send(sock, seqb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0;
    rc |= zmq_send(sock, body, blen, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0;
    rc |= zmq_send(sock, mac, maclen, ZMQ_DONTWAIT) < 0;
    return rc ? -1 : 0;
}

static int send_signed(ld_cluster *c, int to, const char *type, const void *body, size_t blen) {
    cl_peer *p = &c->peers[to];
    p->seq_out++;
    if (c->rank == 0) return send_ctl(c->ctl, p->ident, p->ident_len, type, body, blen, p->key, p->seq_out);
    return send_ctl(c->ctl, NULL, 0, type, body, blen, p->key, p->seq_out);
}

/* check seq and mac of frames [off] MAGIC type seq body mac against peer p */
static int verify(cl_peer *p, frames *f, int off) {
    if (fl_(f, off + 2) != 8 || fl_(f, off + 4) != 32) return -1;
    char type[32];
    size_t tl = fl_(f, off + 1);
    if (tl >= sizeof type) return -1;
    memcpy(type, fd_(f, off + 1), tl);
    type[tl] = 0;
    unsigned char mac[32];
    part ps[3] = {{type, tl + 1}, {fd_(f, off + 2), 8}, {fd_(f, off + 3), fl_(f, off + 3)}};
    if (hmac(p->key, 32, ps, 3, mac)) return -1;
    if (CRYPTO_memcmp(mac, fd_(f, off + 4), 32)) return -1;
    uint64_t seq = get_be64(fd_(f, off + 2));
    if (seq <= p->seq_in) return -2;    /* a replay */
    p->seq_in = seq;
    return 0;
}

/* ================================================================ peer state */
static void peer_name(ld_cluster *c, int r) {
    cl_peer *p = &c->peers[r];
    snprintf(p->name, sizeof p->name, "%.23s %d (pid %d on %.63s, %.159s)", c->kind, r, p->pid, p->host[0] ? p->host : "?",
             p->data_ep[0] ? p->data_ep : r == 0 ? c->leader_ep : "no data plane");
}

static void set_state(ld_cluster *c, int r, int state, const char *reason) {
    pthread_mutex_lock(&c->mu);
    cl_peer *p = &c->peers[r];
    if (p->state != PEER_LOST && p->state != state) {
        p->state = state;
        p->since = cl_now();
        snprintf(p->reason, sizeof p->reason, "%s", reason);
    }
    pthread_mutex_unlock(&c->mu);
}

int cl_trouble(ld_cluster *c, int *rank, char *msg, size_t n) {
    int worst = PEER_JOINED;
    pthread_mutex_lock(&c->mu);
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        int s = c->peers[r].state;
        if (s == PEER_LOST || (s == PEER_DONE && worst != PEER_LOST)) {
            if (worst == s) continue;
            worst = s;
            *rank = r;
            snprintf(msg, n, "%s %s", c->peers[r].name, c->peers[r].reason);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return worst;
}

int cl_break(ld_cluster *c, int status) {
    pthread_mutex_lock(&c->mu);
    if (!c->broken) {
        c->broken = 1;
        c->broken_status = status;
        snprintf(c->broken_msg, sizeof c->broken_msg, "%s", ld_error());
    }
    pthread_mutex_unlock(&c->mu);
    return status;
}

int ld_cluster_check(ld_cluster *c) {
    pthread_mutex_lock(&c->mu);
    int st = LD_OK;
    if (c->broken) st = ld_fail((ld_status)c->broken_status, "%s", c->broken_msg);
    pthread_mutex_unlock(&c->mu);
    if (st) return st;
    int r;
    char msg[512];
    if (cl_trouble(c, &r, msg, sizeof msg) == PEER_LOST) return ld_fail(LD_EDEVICE, "%s", msg);
    return LD_OK;
}

int ld_cluster_rank(const ld_cluster *c) { return c->rank; }
int ld_cluster_size(const ld_cluster *c) { return c->size; }
const char *ld_cluster_peer_name(const ld_cluster *c, int r) { return r >= 0 && r < c->size ? c->peers[r].name : "?"; }
int ld_cluster_peer_pid(const ld_cluster *c, int r) { return r >= 0 && r < c->size ? c->peers[r].pid : 0; }

/* ================================================================ the control thread */
typedef struct {
    int used, rank, pid;
    unsigned char ident[256];
    size_t ident_len;
    char host[64], data_ep[160], addr[64];
    unsigned char nl[16], nm[16];
    double t;
} pending;

typedef struct {
    ld_cluster *c;
    pending pend[MAX_PENDING];
    int ready, failed;
    unsigned char nm[16], nl[16];   /* member: its nonce, the leader's */
    int member_state;               /* 0 hello sent, 1 authed (waiting for welcome), 2 ready */
    double start, next_hb;
} thr_state;

static void to_main(ld_cluster *c, const char *kind, const char *text) {
    zmq_send(c->pipe_thr, kind, strlen(kind), text ? ZMQ_SNDMORE : 0);
    if (text) zmq_send(c->pipe_thr, text, strlen(text), 0);
}

static void thr_fail(thr_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void thr_fail(thr_state *s, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->failed = 1;
    to_main(s->c, "FAIL", msg);
}

static void peer_addr(frames *f, int i, char *out, size_t n) {
    const char *a = zmq_msg_gets(&f->m[i], "Peer-Address");
    snprintf(out, n, "%s", a ? a : "an unknown address");
}

static void deliver_app(ld_cluster *c, int from, frames *f, int off) {
    /* body: app type, NUL, payload */
    const char *b = fd_(f, off + 3);
    size_t n = fl_(f, off + 3);
    const char *z = memchr(b, 0, n < 32 ? n : 32);
    if (!z) { cl_log("rejected an application message without a type from %s", c->peers[from].name); return; }
    int32_t fr = from;
    zmq_send(c->pipe_thr, "MSG", 3, ZMQ_SNDMORE);
    zmq_send(c->pipe_thr, &fr, sizeof fr, ZMQ_SNDMORE);
    zmq_send(c->pipe_thr, b, (size_t)(z - b), ZMQ_SNDMORE);
    zmq_send(c->pipe_thr, z + 1, n - (size_t)(z - b) - 1, 0);
}

static void notice_failed(ld_cluster *c, int r, const char *kind, const char *reason) {
    /* leader: tell every other member about rank r */
    char body[400];
    snprintf(body, sizeof body, "rank=%d\nkind=%s\nreason=%s\n", r, kind, reason);
    for (int q = 1; q < c->size; q++)
        if (q != r && c->peers[q].state == PEER_JOINED) send_signed(c, q, "FAILED", body, strlen(body));
}

static void leader_welcome(thr_state *s) {
    ld_cluster *c = s->c;
    char *body = malloc((size_t)c->size * 400 + 128);
    if (!body) { thr_fail(s, "out of memory"); return; }
    size_t k = 0;
    char hex[33];
    to_hex(c->session, 16, hex);
    k += (size_t)sprintf(body + k, "session=%s\n", hex);
    for (int r = 0; r < c->size; r++) {
        cl_peer *p = &c->peers[r];
        k += (size_t)sprintf(body + k, "peer%d=%d %s %s\n", r, p->pid, p->host, p->data_ep[0] ? p->data_ep : "-");
    }
    for (int r = 1; r < c->size; r++) send_signed(c, r, "WELCOME", body, k);
    free(body);
    s->ready = 1;
    double now = cl_now();
    for (int r = 1; r < c->size; r++) c->peers[r].last_seen = now;
    to_main(c, "READY", NULL);
}

static pending *find_pending(thr_state *s, frames *f) {
    for (int i = 0; i < MAX_PENDING; i++) {
        pending *p = &s->pend[i];
        if (p->used && p->ident_len == fl_(f, 0) && !memcmp(p->ident, fd_(f, 0), p->ident_len)) return p;
    }
    return NULL;
}

static void refuse(ld_cluster *c, frames *f, const char *why) {
    send_ctl(c->ctl, fd_(f, 0), fl_(f, 0), "REFUSED", why, strlen(why), NULL, 0);
}

static void leader_handshake(thr_state *s, frames *f, const char *addr) {
    ld_cluster *c = s->c;
    const char *body = fd_(f, 4);
    size_t blen = fl_(f, 4);
    if (frame_is(f, 2, "HELLO")) {
        long rank, size, pid;
        char host[64], data[160], nonce[40];
        if (kv_int(body, blen, "rank", 0, 1 << 20, &rank) || kv_int(body, blen, "size", 1, 1 << 20, &size) ||
            kv_int(body, blen, "pid", 0, 1L << 30, &pid) || kv_get(body, blen, "host", host, sizeof host) ||
            kv_get(body, blen, "data", data, sizeof data) || kv_get(body, blen, "nonce", nonce, sizeof nonce)) {
            cl_log("rejected a malformed HELLO from %s", addr);
            return;
        }
        pending *p = find_pending(s, f);
        if (!p) for (int i = 0; i < MAX_PENDING && !p; i++) if (!s->pend[i].used) p = &s->pend[i];
        if (!p) { cl_log("refused a connection from %s: too many handshakes in progress", addr); return; }
        if (size != c->size || rank < 1 || rank >= c->size) {
            char why[160];
            snprintf(why, sizeof why, "this cluster has %d ranks (the leader is rank 0); you said rank %ld of %ld",
                     c->size, rank, size);
            cl_log("refused a connection from %s: %s", addr, why);
            refuse(c, f, why);
            return;
        }
        if (c->peers[rank].state != PEER_NONE) {
            char why[300];
            snprintf(why, sizeof why, "rank %ld has already joined (%s)", rank, c->peers[rank].name);
            cl_log("refused a connection from %s: %s", addr, why);
            refuse(c, f, why);
            return;
        }
        memset(p, 0, sizeof *p);
        if (from_hex(nonce, p->nm, 16)) { cl_log("rejected a malformed HELLO from %s (nonce)", addr); return; }
        p->used = 1;
        p->rank = (int)rank;
        p->pid = (int)pid;
        p->ident_len = fl_(f, 0) < sizeof p->ident ? fl_(f, 0) : sizeof p->ident;
        memcpy(p->ident, fd_(f, 0), p->ident_len);
        snprintf(p->host, sizeof p->host, "%s", host);
        snprintf(p->data_ep, sizeof p->data_ep, "%s", strcmp(data, "-") ? data : "");
        snprintf(p->addr, sizeof p->addr, "%s", addr);
        p->t = cl_now();
        ld_random_bytes(p->nl, 16);
        int32_t r32 = (int32_t)rank;
        unsigned char proof[32];
        part ps[4] = {{"ldist-leader", 12}, {p->nm, 16}, {p->nl, 16}, {&r32, 4}};
        hmac(c->secret, c->secret_len, ps, 4, proof);
        char out[200], h1[33], h2[65];
        to_hex(p->nl, 16, h1);
        to_hex(proof, 32, h2);
        int n = snprintf(out, sizeof out, "nonce=%s\nproof=%s\n", h1, h2);
        send_ctl(c->ctl, p->ident, p->ident_len, "CHALLENGE", out, (size_t)n, NULL, 0);
        return;
    }
    /* AUTH */
    pending *p = find_pending(s, f);
    if (!p) { cl_log("rejected an AUTH without a HELLO from %s", addr); return; }
    char proofh[80];
    unsigned char got[32], want[32];
    int32_t r32 = p->rank;
    part ps[4] = {{"ldist-member", 12}, {p->nl, 16}, {p->nm, 16}, {&r32, 4}};
    if (kv_get(body, blen, "proof", proofh, sizeof proofh) || from_hex(proofh, got, 32) ||
        hmac(c->secret, c->secret_len, ps, 4, want) || CRYPTO_memcmp(got, want, 32)) {
        cl_log("refused a connection from %s claiming %s %d: it does not know the cluster secret", p->addr, c->kind, p->rank);
        refuse(c, f, "authentication failed: wrong cluster secret");
        p->used = 0;
        return;
    }
    if (c->peers[p->rank].state != PEER_NONE) { refuse(c, f, "rank already joined"); p->used = 0; return; }
    cl_peer *q = &c->peers[p->rank];
    part ks[3] = {{"ldist-session", 13}, {p->nl, 16}, {p->nm, 16}};
    hmac(c->secret, c->secret_len, ks, 3, q->key);
    memcpy(q->ident, p->ident, p->ident_len);
    q->ident_len = p->ident_len;
    q->pid = p->pid;
    snprintf(q->host, sizeof q->host, "%s", p->host);
    snprintf(q->data_ep, sizeof q->data_ep, "%s", p->data_ep);
    q->seq_in = q->seq_out = 0;
    q->last_seen = cl_now();
    peer_name(c, p->rank);
    pthread_mutex_lock(&c->mu);
    q->state = PEER_JOINED;
    pthread_mutex_unlock(&c->mu);
    p->used = 0;
    send_signed(c, p->rank, "JOINED", "", 0);
    int joined = 1;
    for (int r = 1; r < c->size; r++) joined += c->peers[r].state == PEER_JOINED;
    if (joined == c->size && !s->ready) leader_welcome(s);
}

static int find_peer_by_ident(ld_cluster *c, frames *f) {
    for (int r = 1; r < c->size; r++) {
        cl_peer *p = &c->peers[r];
        if (p->state != PEER_NONE && p->ident_len == fl_(f, 0) && !memcmp(p->ident, fd_(f, 0), p->ident_len)) return r;
    }
    return -1;
}

static void leader_message(thr_state *s) {
    ld_cluster *c = s->c;
    frames f;
    while (frames_recv(c->ctl, &f) == 0) {
        char addr[64] = "?";
        if (f.n > 1) peer_addr(&f, 1, addr, sizeof addr);
        if (f.too_many || f.n != 6 || !frame_is(&f, 1, MAGIC) || fl_(&f, 2) >= 32) {
            cl_log("rejected a malformed control message from %s (%d frames%s)", addr, f.n,
                   f.n > 1 && !frame_is(&f, 1, MAGIC) ? ", not an ldist message" : "");
            frames_close(&f);
            continue;
        }
        char type[32];
        printable(fd_(&f, 2), fl_(&f, 2), type, sizeof type);
        if (frame_is(&f, 2, "HELLO") || frame_is(&f, 2, "AUTH")) {
            if (find_peer_by_ident(c, &f) >= 0) cl_log("rejected a second %s on an authenticated connection from %s", type, addr);
            else leader_handshake(s, &f, addr);
            frames_close(&f);
            continue;
        }
        int r = find_peer_by_ident(c, &f);
        if (r < 0) {
            cl_log("rejected a %s message from an unauthenticated connection (%s)", type, addr);
            frames_close(&f);
            continue;
        }
        cl_peer *p = &c->peers[r];
        int v = verify(p, &f, 1);
        if (v) {
            cl_log("rejected a %s message from %s: %s", type, p->name, v == -2 ? "replayed" : "bad signature");
            frames_close(&f);
            continue;
        }
        p->last_seen = cl_now();
        if (frame_is(&f, 2, "HB")) {
        } else if (frame_is(&f, 2, "BYE")) {
            set_state(c, r, PEER_DONE, "has finished");
            notice_failed(c, r, "done", "has finished");
        } else if (frame_is(&f, 2, "APP")) {
            deliver_app(c, r, &f, 1);
        } else {
            cl_log("rejected a message of unknown type '%s' from %s", type, p->name);
        }
        frames_close(&f);
    }
}

static void member_hello(thr_state *s) {
    ld_cluster *c = s->c;
    cl_peer *me = &c->peers[c->rank];
    char body[600], hex[33];
    ld_random_bytes(s->nm, 16);
    to_hex(s->nm, 16, hex);
    int n = snprintf(body, sizeof body, "rank=%d\nsize=%d\npid=%d\nhost=%s\ndata=%s\nnonce=%s\n", c->rank, c->size,
                     me->pid, me->host, me->data_ep[0] ? me->data_ep : "-", hex);
    send_ctl(c->ctl, NULL, 0, "HELLO", body, (size_t)n, NULL, 0);
}

static void member_welcome(thr_state *s, const char *body, size_t n) {
    ld_cluster *c = s->c;
    char hex[40], key[16], val[300];
    if (kv_get(body, n, "session", hex, sizeof hex) || from_hex(hex, c->session, 16)) {
        thr_fail(s, "the leader sent a malformed WELCOME");
        return;
    }
    for (int r = 0; r < c->size; r++) {
        snprintf(key, sizeof key, "peer%d", r);
        char host[64], ep[160];
        int pid;
        if (kv_get(body, n, key, val, sizeof val) || sscanf(val, "%d %63s %159s", &pid, host, ep) != 3) {
            thr_fail(s, "the leader sent a malformed WELCOME (%s)", key);
            return;
        }
        cl_peer *p = &c->peers[r];
        p->pid = pid;
        snprintf(p->host, sizeof p->host, "%s", host);
        snprintf(p->data_ep, sizeof p->data_ep, "%s", strcmp(ep, "-") ? ep : "");
        peer_name(c, r);
        pthread_mutex_lock(&c->mu);
        p->state = PEER_JOINED;
        pthread_mutex_unlock(&c->mu);
    }
    unsigned char tok[32];
    part ps[2] = {{"ldist-data", 10}, {c->session, 16}};
    hmac(c->secret, c->secret_len, ps, 2, tok);
    to_hex(tok, 32, c->token);
    __atomic_store_n(&c->token_ready, 1, __ATOMIC_RELEASE);
    c->peers[0].last_seen = cl_now();
    s->member_state = 2;
    s->ready = 1;
    to_main(c, "READY", NULL);
}

static void member_message(thr_state *s) {
    ld_cluster *c = s->c;
    cl_peer *L = &c->peers[0];
    frames f;
    while (frames_recv(c->ctl, &f) == 0) {
        if (f.too_many || f.n != 5 || !frame_is(&f, 0, MAGIC) || fl_(&f, 1) >= 32) {
            cl_log("rejected a malformed control message from the leader (%d frames)", f.n);
            frames_close(&f);
            continue;
        }
        const char *body = fd_(&f, 3);
        size_t blen = fl_(&f, 3);
        if (s->member_state == 0 && frame_is(&f, 1, "CHALLENGE")) {
            char nh[40], ph[80];
            unsigned char got[32], want[32];
            int32_t r32 = c->rank;
            if (kv_get(body, blen, "nonce", nh, sizeof nh) || from_hex(nh, s->nl, 16) ||
                kv_get(body, blen, "proof", ph, sizeof ph) || from_hex(ph, got, 32)) {
                cl_log("rejected a malformed CHALLENGE from the leader");
            } else {
                part ps[4] = {{"ldist-leader", 12}, {s->nm, 16}, {s->nl, 16}, {&r32, 4}};
                hmac(c->secret, c->secret_len, ps, 4, want);
                if (CRYPTO_memcmp(got, want, 32)) {
                    thr_fail(s, "the leader at %s does not know the cluster secret: refusing to join it", c->leader_ep);
                } else {
                    part pm[4] = {{"ldist-member", 12}, {s->nl, 16}, {s->nm, 16}, {&r32, 4}};
                    unsigned char proof[32];
                    char out[100], h[65];
                    hmac(c->secret, c->secret_len, pm, 4, proof);
                    to_hex(proof, 32, h);
                    int n = snprintf(out, sizeof out, "proof=%s\n", h);
                    part ks[3] = {{"ldist-session", 13}, {s->nl, 16}, {s->nm, 16}};
                    hmac(c->secret, c->secret_len, ks, 3, L->key);
                    L->seq_in = L->seq_out = 0;
                    send_ctl(c->ctl, NULL, 0, "AUTH", out, (size_t)n, NULL, 0);
                    s->member_state = 1;
                }
            }
            frames_close(&f);
            continue;
        }
        if (s->member_state <= 1 && frame_is(&f, 1, "REFUSED")) {
            char why[300];
            printable(body, blen, why, sizeof why);
            thr_fail(s, "the leader at %s refused this %s: %s", c->leader_ep, c->kind, why);
            frames_close(&f);
            continue;
        }
        if (s->member_state == 0) {
            cl_log("rejected an unexpected message before authentication");
            frames_close(&f);
            continue;
        }
        char type[32];
        printable(fd_(&f, 1), fl_(&f, 1), type, sizeof type);
        int v = verify(L, &f, 0);
        if (v) {
            cl_log("rejected a %s message from the leader: %s", type, v == -2 ? "replayed" : "bad signature");
            frames_close(&f);
            continue;
        }
        L->last_seen = cl_now();
        if (frame_is(&f, 1, "JOINED") || frame_is(&f, 1, "HB")) {
        } else if (frame_is(&f, 1, "WELCOME") && s->member_state == 1) {
            member_welcome(s, body, blen);
        } else if (frame_is(&f, 1, "FAILED")) {
            long r;
            char kind[16], reason[200];
            if (kv_int(body, blen, "rank", 0, c->size - 1, &r) || kv_get(body, blen, "kind", kind, sizeof kind) ||
                kv_get(body, blen, "reason", reason, sizeof reason))
                cl_log("rejected a malformed FAILED notice from the leader");
            else if (r != c->rank) {
                if (!strcmp(kind, "lost")) cl_log("the leader reports %s %s", c->peers[r].name, reason);
                set_state(c, (int)r, strcmp(kind, "lost") ? PEER_DONE : PEER_LOST, reason);
            }
        } else if (frame_is(&f, 1, "BYE")) {
            set_state(c, 0, PEER_DONE, "has finished");
        } else if (frame_is(&f, 1, "APP") && s->ready) {
            deliver_app(c, 0, &f, 0);
        } else {
            cl_log("rejected a message of unknown type '%s' from the leader", type);
        }
        frames_close(&f);
    }
}

/* ZAP: the ring's PLAIN password must be this session's token */
static void zap_request(ld_cluster *c) {
    frames f;
    if (frames_recv(c->zap, &f) < 0) return;
    const char *status = "400", *text = "refused";
    if (f.n >= 6) {
        if (frame_is(&f, 5, "NULL")) status = "200", text = "OK";
        else if (frame_is(&f, 5, "PLAIN") && f.n >= 8) {
            if (__atomic_load_n(&c->token_ready, __ATOMIC_ACQUIRE) && fl_(&f, 7) == 64 &&
                !CRYPTO_memcmp(fd_(&f, 7), c->token, 64))
                status = "200", text = "OK";
            else {
                char addr[64];
                printable(fd_(&f, 3), fl_(&f, 3), addr, sizeof addr);
                cl_log("refused a data-plane connection from %s: wrong password", addr);
            }
        }
    }
    zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(c->zap, f.n > 1 ? fd_(&f, 1) : "", f.n > 1 ? fl_(&f, 1) : 0, ZMQ_SNDMORE);
    zmq_send(c->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(c->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(c->zap, "", 0, 0);
    frames_close(&f);
}

/* commands from the calling thread; returns 1 on STOP */
static int pipe_command(thr_state *s) {
    ld_cluster *c = s->c;
    frames f;
    int stop = 0;
    while (frames_recv(c->pipe_thr, &f) == 0) {
        if (frame_is(&f, 0, "STOP")) stop = 1;
        else if (frame_is(&f, 0, "BYE") && s->ready) {
            if (c->rank == 0) { for (int r = 1; r < c->size; r++) if (c->peers[r].state == PEER_JOINED) send_signed(c, r, "BYE", "", 0); }
            else send_signed(c, 0, "BYE", "", 0);
        } else if (frame_is(&f, 0, "SEND") && f.n == 4 && fl_(&f, 1) == 4) {
            int32_t to;
            memcpy(&to, fd_(&f, 1), 4);
            /* body: type NUL payload */
            size_t tl = fl_(&f, 2), pl = fl_(&f, 3);
            char *body = malloc(tl + 1 + pl + 1);
            if (body) {
                memcpy(body, fd_(&f, 2), tl);
                body[tl] = 0;
                memcpy(body + tl + 1, fd_(&f, 3), pl);
                if (to >= 0 && to < c->size && to != c->rank && c->peers[to].state == PEER_JOINED) send_signed(c, to, "APP", body, tl + 1 + pl);
                free(body);
            }
        }
        frames_close(&f);
        if (stop) break;
    }
    return stop;
}

static void heartbeat(thr_state *s, double now) {
    ld_cluster *c = s->c;
    if (now >= s->next_hb) {
        s->next_hb = now + c->hb;
        if (c->rank == 0) { for (int r = 1; r < c->size; r++) if (c->peers[r].state == PEER_JOINED) send_signed(c, r, "HB", "", 0); }
        else if (s->member_state >= 1) send_signed(c, 0, "HB", "", 0);
    }
    if (!s->ready) return;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank || (c->rank != 0 && r != 0)) continue;
        cl_peer *p = &c->peers[r];
        if (p->state == PEER_JOINED && now - p->last_seen > c->hb_timeout) {
            char why[200];
            snprintf(why, sizeof why, "is lost: no heartbeat for %.1f s (killed, crashed or hung)", now - p->last_seen);
            cl_log("%s %s", p->name, why);
            set_state(c, r, PEER_LOST, why);
            if (c->rank == 0) notice_failed(c, r, "lost", why);
        }
    }
}

static void *control_main(void *arg) {
    thr_state *s = arg;
    ld_cluster *c = s->c;
    s->start = cl_now();
    if (c->rank != 0) member_hello(s);
    for (;;) {
        double now = cl_now();
        if (!s->ready && !s->failed && now - s->start > c->rdv_timeout) {
            if (c->rank == 0) {
                char missing[300] = "";
                size_t k = 0;
                int nmiss = 0;
                for (int r = 1; r < c->size; r++)
                    if (c->peers[r].state != PEER_JOINED) {
                        nmiss++;
                        if (k < sizeof missing - 20) k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", nmiss > 1 ? ", " : "", r);
                    }
                thr_fail(s, "rendezvous at %s: only %d of %d %ss joined within %.0f s (missing: %s %s)", c->leader_ep,
                         c->size - nmiss, c->size, c->kind, c->rdv_timeout, c->kind, missing);
            } else {
                thr_fail(s, "rendezvous: no %s from the leader (%s 0 at %s) within %.0f s", s->member_state ? "welcome" : "answer",
                         c->kind, c->leader_ep, c->rdv_timeout);
            }
        }
        zmq_pollitem_t it[3] = {{c->ctl, 0, ZMQ_POLLIN, 0}, {c->pipe_thr, 0, ZMQ_POLLIN, 0}, {c->zap, 0, ZMQ_POLLIN, 0}};
        int nit = c->zap ? 3 : 2;
        double wait = s->next_hb - now;
        if (wait > c->hb) wait = c->hb;
        if (wait < 0.001) wait = 0.001;
        int rc = zmq_poll(it, nit, (long)(wait * 1000) + 1);
        if (rc < 0) {
            if (errno == EINTR) continue;
            if (errno == ETERM) break;
            continue;
        }
        if (it[1].revents & ZMQ_POLLIN) if (pipe_command(s)) break;
        if (it[0].revents & ZMQ_POLLIN) {
            if (c->rank == 0) leader_message(s);
            else member_message(s);
        }
        if (nit == 3 && (it[2].revents & ZMQ_POLLIN)) zap_request(c);
        /* handshakes that stalled */
        now = cl_now();
        for (int i = 0; i < MAX_PENDING; i++)
            if (s->pend[i].used && now - s->pend[i].t > 10) s->pend[i].used = 0;
        heartbeat(s, now);
    }
    return NULL;
}

/* ================================================================ join / free */
static int sock_opt_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

/* "host:port" (or "tcp://host:port") -> "tcp://host:port"; "localhost" is
   127.0.0.1, since ZeroMQ binds interfaces and addresses, not names */
static int endpoint(const char *addr, char *out, size_t n, const char *what) {
    if (!addr || !*addr) return ld_fail(LD_EARG, "%s: empty address", what);
    if (!strncmp(addr, "tcp://", 6)) addr += 6;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1]) return ld_fail(LD_EARG, "%s: '%s' is not host:port", what, addr);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535) return ld_fail(LD_EARG, "%s: bad port in '%s'", what, addr);
    int hl = (int)(colon - addr);
    if (hl == 9 && !strncmp(addr, "localhost", 9)) snprintf(out, n, "tcp://127.0.0.1:%ld", port);
    else snprintf(out, n, "tcp://%.*s:%ld", hl, addr, port);
    return LD_OK;
}

static void cluster_destroy(ld_cluster *c, int linger_ms) {
    if (c->thr_running) {
        zmq_send(c->pipe_main, "STOP", 4, 0);
        pthread_join(c->thr, NULL);
        c->thr_running = 0;
    }
    if (c->push) { sock_opt_int(c->push, ZMQ_LINGER, linger_ms); zmq_close(c->push); }
    if (c->pull) zmq_close(c->pull);
    if (c->ctl) { sock_opt_int(c->ctl, ZMQ_LINGER, c->broken ? 0 : 200); zmq_close(c->ctl); }
    if (c->zap) zmq_close(c->zap);
    if (c->pipe_main) zmq_close(c->pipe_main);
    if (c->pipe_thr) zmq_close(c->pipe_thr);
    if (c->zctx) zmq_ctx_term(c->zctx);
    if (c->secret) { OPENSSL_cleanse(c->secret, c->secret_len); free(c->secret); }
    pthread_mutex_destroy(&c->mu);
    free(c->ts);
    free(c->peers);
    free(c);
}

/* wait for READY/FAIL from the control thread */
static int wait_ready(ld_cluster *c, double limit) {
    double t0 = cl_now();
    for (;;) {
        zmq_pollitem_t it = {c->pipe_main, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, 100);
        if (rc > 0) {
            frames f;
            if (frames_recv(c->pipe_main, &f) == 0) {
                int ok = frame_is(&f, 0, "READY");
                char msg[600] = "rendezvous failed";
                if (!ok && f.n > 1) printable(fd_(&f, 1), fl_(&f, 1), msg, sizeof msg);
                int fail = frame_is(&f, 0, "FAIL");
                frames_close(&f);
                if (ok) return LD_OK;
                if (fail) return ld_fail(LD_EDEVICE, "%s", msg);
            }
        }
        if (ld_interrupt_flag) return ld_fail(LD_EINTERRUPT, "interrupted while joining the cluster");
        if (cl_now() - t0 > limit + 5) return ld_fail(LD_EDEVICE, "rendezvous: the control thread did not answer");
    }
}

ld_cluster *ld_cluster_join(const ld_cluster_opts *o) {
    if (o->size < 1 || o->rank < 0 || o->rank >= o->size) {
        ld_fail(LD_EARG, "rank %d of %d: the rank must be in [0, size)", o->rank, o->size);
        return NULL;
    }
    if (o->size > 1 && (!o->secret || o->secret_len < 16)) {
        ld_fail(LD_EARG, "a cluster needs a shared secret of at least 16 bytes (LDIST_SECRET)");
        return NULL;
    }
    ld_cluster *c = calloc(1, sizeof *c);
    if (!c || !(c->peers = calloc((size_t)o->size, sizeof *c->peers))) {
        free(c);
        ld_fail(LD_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->rank = o->rank;
    c->size = o->size;
    c->data_plane = o->data_plane;
    snprintf(c->kind, sizeof c->kind, "%s", o->name && *o->name ? o->name : "worker");
    c->timeout = o->timeout > 0 ? o->timeout : 30;
    c->rdv_timeout = o->rendezvous_timeout > 0 ? o->rendezvous_timeout : (c->timeout > 60 ? c->timeout : 60);
    c->hb = o->heartbeat > 0 ? o->heartbeat : 0.25;
    c->hb_timeout = o->heartbeat_timeout > 0 ? o->heartbeat_timeout : (c->timeout < 5 ? c->timeout : 5);
    if (c->hb_timeout < 2 * c->hb) c->hb_timeout = 2 * c->hb;
    c->chunk_bytes = o->chunk_bytes ? o->chunk_bytes : 512 * 1024;
    const char *ce = getenv("LDIST_RING_CHUNK");
    if (ce && atol(ce) >= 1024) c->chunk_bytes = (size_t)atol(ce);
    cl_peer *me = &c->peers[c->rank];
    me->pid = (int)getpid();
    gethostname(me->host, sizeof me->host - 1);
    me->state = PEER_JOINED;
    if (c->size == 1) { peer_name(c, 0); return c; }

    if (endpoint(o->leader, c->leader_ep, sizeof c->leader_ep, "the leader's address")) goto fail;
    c->secret = malloc(o->secret_len);
    if (!c->secret) { ld_fail(LD_ENOMEM, "out of memory"); goto fail; }
    memcpy(c->secret, o->secret, o->secret_len);
    c->secret_len = o->secret_len;
    if (!(c->zctx = zmq_ctx_new())) { ld_fail(LD_EDEVICE, "zmq_ctx_new failed"); goto fail; }
    zmq_ctx_set(c->zctx, ZMQ_BLOCKY, 0);
    char pipe_ep[64];
    snprintf(pipe_ep, sizeof pipe_ep, "inproc://ldist-cluster-%p", (void *)c);
    c->pipe_thr = zmq_socket(c->zctx, ZMQ_PAIR);
    c->pipe_main = zmq_socket(c->zctx, ZMQ_PAIR);
    if (!c->pipe_thr || !c->pipe_main || zmq_bind(c->pipe_thr, pipe_ep) || zmq_connect(c->pipe_main, pipe_ep)) {
        ld_fail(LD_EDEVICE, "cluster: inproc pipe: %s", zmq_strerror(errno));
        goto fail;
    }
    sock_opt_int(c->pipe_thr, ZMQ_LINGER, 0);
    sock_opt_int(c->pipe_main, ZMQ_LINGER, 0);

    /* the ring's receiving end first, so HELLO can say where it is */
    if (c->data_plane) {
        c->zap = zmq_socket(c->zctx, ZMQ_REP);
        if (!c->zap || zmq_bind(c->zap, "inproc://zeromq.zap.01")) {
            ld_fail(LD_EDEVICE, "cluster: ZAP handler: %s", zmq_strerror(errno));
            goto fail;
        }
        sock_opt_int(c->zap, ZMQ_LINGER, 0);
        char lep[200];
        if (o->listen && *o->listen) {
            if (endpoint(o->listen, lep, sizeof lep, "this worker's address")) goto fail;
        } else {
            /* the leader's host, any port */
            const char *colon = strrchr(c->leader_ep, ':');
            snprintf(lep, sizeof lep, "%.*s:0", (int)(colon - c->leader_ep), c->leader_ep);
        }
        char *pz = strrchr(lep, ':');
        if (pz && !strcmp(pz, ":0")) strcpy(pz, ":*");
        c->pull = zmq_socket(c->zctx, ZMQ_PULL);
        sock_opt_int(c->pull, ZMQ_PLAIN_SERVER, 1);
        zmq_setsockopt(c->pull, ZMQ_ZAP_DOMAIN, "ldist", 5);
        sock_opt_int(c->pull, ZMQ_LINGER, 0);
        sock_opt_int(c->pull, ZMQ_RCVHWM, 0);
        if (zmq_bind(c->pull, lep)) {
            ld_fail(LD_EDEVICE, "cannot listen on %s (%s %d's data-plane address): %s", lep + 6, c->kind, c->rank, zmq_strerror(errno));
            goto fail;
        }
        size_t sz = sizeof me->data_ep;
        zmq_getsockopt(c->pull, ZMQ_LAST_ENDPOINT, me->data_ep, &sz);
        /* bound to every interface: peers reach it by this host's name */
        if (!strncmp(me->data_ep, "tcp://0.0.0.0:", 14)) {
            char port[16];
            snprintf(port, sizeof port, "%s", me->data_ep + 14);
            snprintf(me->data_ep, sizeof me->data_ep, "tcp://%s:%s", me->host, port);
        }
        snprintf(c->listen_ep, sizeof c->listen_ep, "%s", me->data_ep);
    }
    peer_name(c, c->rank);

    c->ctl = zmq_socket(c->zctx, c->rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER);
    if (!c->ctl) { ld_fail(LD_EDEVICE, "zmq_socket: %s", zmq_strerror(errno)); goto fail; }
    sock_opt_int(c->ctl, ZMQ_LINGER, 0);
    int64_t maxsz = MAX_CTL_MSG;
    zmq_setsockopt(c->ctl, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
    sock_opt_int(c->ctl, ZMQ_SNDHWM, 0);
    sock_opt_int(c->ctl, ZMQ_RCVHWM, 0);
    if (c->rank == 0) {
        if (zmq_bind(c->ctl, c->leader_ep)) {
            ld_fail(LD_EDEVICE, "cannot listen on %s for the cluster's rendezvous: %s", c->leader_ep + 6, zmq_strerror(errno));
            goto fail;
        }
        ld_random_bytes(c->session, 16);
        unsigned char tok[32];
        part ps[2] = {{"ldist-data", 10}, {c->session, 16}};
        hmac(c->secret, c->secret_len, ps, 2, tok);
        to_hex(tok, 32, c->token);
        c->token_ready = 1;
    } else {
        sock_opt_int(c->ctl, ZMQ_RECONNECT_IVL, 100);
        if (zmq_connect(c->ctl, c->leader_ep)) {
            ld_fail(LD_EDEVICE, "cannot connect to the leader at %s: %s", c->leader_ep + 6, zmq_strerror(errno));
            goto fail;
        }
    }
    thr_state *s = calloc(1, sizeof *s);
    if (!s) { ld_fail(LD_ENOMEM, "out of memory"); goto fail; }
    s->c = c;
    c->ts = s;                      /* freed with the cluster */
    if (pthread_create(&c->thr, NULL, control_main, s)) { ld_fail(LD_EDEVICE, "cannot start the cluster thread"); goto fail; }
    c->thr_running = 1;
    if (wait_ready(c, c->rdv_timeout)) goto fail;
    if (c->data_plane) {
        int next = (c->rank + 1) % c->size;
        c->push = zmq_socket(c->zctx, ZMQ_PUSH);
        char user[16];
        snprintf(user, sizeof user, "%d", c->rank);
        zmq_setsockopt(c->push, ZMQ_PLAIN_USERNAME, user, strlen(user));
        zmq_setsockopt(c->push, ZMQ_PLAIN_PASSWORD, c->token, 64);
        sock_opt_int(c->push, ZMQ_SNDHWM, 0);
        sock_opt_int(c->push, ZMQ_LINGER, 0);
        if (!c->peers[next].data_ep[0] || zmq_connect(c->push, c->peers[next].data_ep)) {
            ld_fail(LD_EDEVICE, "cannot connect to %s: %s", c->peers[next].name, zmq_strerror(errno));
            goto fail;
        }
        /* one tiny all-reduce proves the ring carries data */
        if (ld_cluster_barrier(c)) goto fail;
    }
    memset(&c->stats, 0, sizeof c->stats);
    return c;
fail:
    c->broken = 1;
    cluster_destroy(c, 0);
    return NULL;
}

void ld_cluster_free(ld_cluster *c) {
    if (!c) return;
    if (c->thr_running && !c->broken) {
        zmq_send(c->pipe_main, "BYE", 3, 0);
        /* let the BYE leave before the thread stops */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* queued ring data may still be on its way to the next rank */
    cluster_destroy(c, c->broken ? 0 : 2000);
}

/* ================================================================ control messages */
int ld_cluster_send(ld_cluster *c, int to, const char *type, const void *data, size_t n) {
    if (c->size == 1 || to == c->rank) return ld_fail(LD_EARG, "send: no other rank %d", to);
    if (to < 0 || to >= c->size) return ld_fail(LD_EARG, "send: rank %d is not in [0, %d)", to, c->size);
    if (c->rank != 0 && to != 0) return ld_fail(LD_EARG, "send: only rank 0 talks to other ranks");
    size_t tl = strlen(type);
    if (tl == 0 || tl > 31) return ld_fail(LD_EARG, "send: message type must be 1..31 bytes");
    int32_t t32 = to;
    int rc = zmq_send(c->pipe_main, "SEND", 4, ZMQ_SNDMORE) < 0;
    rc |= zmq_send(c->pipe_main, &t32, 4, ZMQ_SNDMORE) < 0;
    rc |= zmq_send(c->pipe_main, type, tl, ZMQ_SNDMORE) < 0;
    rc |= zmq_send(c->pipe_main, data, n, 0) < 0;
    return rc ? ld_fail(LD_EDEVICE, "send: %s", zmq_strerror(errno)) : LD_OK;
}

int ld_cluster_recv(ld_cluster *c, double timeout, int *from, char type[32], void **data, size_t *n) {
    *data = NULL;
    *n = 0;
    if (c->size == 1) return 0;
    if (timeout < 0) timeout = c->timeout;
    double t0 = cl_now();
    for (;;) {
        zmq_pollitem_t it = {c->pipe_main, 0, ZMQ_POLLIN, 0};
        double left = timeout - (cl_now() - t0);
        long ms = left > 0.05 ? 50 : (long)(left * 1000);
        if (ms < 0) ms = 0;
        int rc = zmq_poll(&it, 1, ms);
        if (rc > 0) {
            frames f;
            if (frames_recv(c->pipe_main, &f) == 0) {
                if (frame_is(&f, 0, "MSG") && f.n == 4 && fl_(&f, 1) == 4 && fl_(&f, 2) < 32) {
                    int32_t fr;
                    memcpy(&fr, fd_(&f, 1), 4);
                    *from = fr;
                    memcpy(type, fd_(&f, 2), fl_(&f, 2));
                    type[fl_(&f, 2)] = 0;
                    *n = fl_(&f, 3);
                    *data = malloc(*n ? *n : 1);
                    if (!*data) { frames_close(&f); return ld_fail(LD_ENOMEM, "out of memory"); }
                    memcpy(*data, fd_(&f, 3), *n);
                    frames_close(&f);
                    return 1;
                }
                frames_close(&f);
            }
            continue;
        }
        if (ld_interrupt_flag) return ld_fail(LD_EINTERRUPT, "interrupted");
        int r;
        char msg[512];
        int t = cl_trouble(c, &r, msg, sizeof msg);
        if (t == PEER_LOST && (c->rank == 0 || r == 0)) return ld_fail(LD_EDEVICE, "%s", msg);
        if (cl_now() - t0 >= timeout) return 0;
    }
}

/* ================================================================ cross-process backends (GPU hook) */
static const ld_xproc_backend *backends[4];
int ld_xproc_register(const ld_xproc_backend *b) {
    for (int i = 0; i < 4; i++)
        if (!backends[i] || !strcmp(backends[i]->name, b->name)) { backends[i] = b; return LD_OK; }
    return ld_fail(LD_EARG, "too many cross-process backends");
}
const ld_xproc_backend *ld_xproc_find(const char *name) {
    for (int i = 0; i < 4; i++) if (backends[i] && !strcmp(backends[i]->name, name)) return backends[i];
    return NULL;
}
