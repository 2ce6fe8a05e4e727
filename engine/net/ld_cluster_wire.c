/* ld_cluster_wire.c - what the control plane is made of: random nonces,
   HMAC-SHA256, hex, "key=value" bodies, multipart frames, and signed
   messages with their sequence numbers (see ld_cluster.h for the protocol). */
#include "ld_cluster_internal.h"
#include "ld_core.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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

static pthread_mutex_t rej_mu = PTHREAD_MUTEX_INITIALIZER;
static double rej_window;           /* start of the current second */
static int rej_lines;               /* lines logged in it */
static long rej_dropped;            /* rejected messages not logged since the last line */

/* the count of what was not logged, once a new second has begun (flush: even
   without a new line to log) */
static long rej_take(double now, int line) {
    long summed = 0;
    pthread_mutex_lock(&rej_mu);
    if (now - rej_window >= 1.0) { rej_window = now; rej_lines = 0; }
    if (rej_lines < CL_LOG_RATE) {
        if (line || rej_dropped) rej_lines++;
        summed = rej_dropped;
        rej_dropped = 0;
    } else if (line) {
        rej_dropped++;
        summed = -1;
    }
    pthread_mutex_unlock(&rej_mu);
    return summed;
}

static void rej_summary(long n) {
    if (n > 0) cl_log("(%ld more rejected messages were not logged: at most %d lines a second)", n, CL_LOG_RATE);
}

void cl_log_rejected(const char *fmt, ...) {
    long summed = rej_take(cl_now(), 1);
    if (summed < 0) return;
    rej_summary(summed);
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cl_log("%s", line);
}

void cl_log_rejected_flush(void) { rej_summary(rej_take(cl_now(), 0)); }

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

void cl_to_hex(const unsigned char *b, size_t n, char *out) {
    static const char h[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) { out[2 * i] = h[b[i] >> 4]; out[2 * i + 1] = h[b[i] & 15]; }
    out[2 * n] = 0;
}
int cl_from_hex(const char *s, unsigned char *out, size_t n) {
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
static EVP_MAC *cl_hmac_alg_;
static void cl_hmac_fetch(void) { cl_hmac_alg_ = EVP_MAC_fetch(NULL, "HMAC", NULL); }
int cl_hmac(const void *key, size_t klen, const cl_part *parts, int np, unsigned char out[32]) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cl_hmac_fetch);
    if (!cl_hmac_alg_) return -1;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(cl_hmac_alg_);
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
int cl_kv_get(const char *body, size_t n, const char *key, char *out, size_t outn) {
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
int cl_kv_int(const char *body, size_t n, const char *key, long lo, long hi, long *v) {
    char buf[32], *end;
    if (cl_kv_get(body, n, key, buf, sizeof buf)) return -1;
    errno = 0;
    long x = strtol(buf, &end, 10);
    if (errno || end == buf || *end || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

/* a printable copy of untrusted bytes, for log lines (truncated with "...") */
void cl_printable(const void *p, size_t n, char *out, size_t outn) {
    const unsigned char *s = p;
    size_t k = 0, i = 0;
    for (; i < n && k + 8 < outn; i++) {
        if (s[i] >= 32 && s[i] < 127) out[k++] = (char)s[i];
        else k += (size_t)snprintf(out + k, outn - k, "\\x%02x", s[i]);
    }
    if (i < n && k + 4 <= outn) { memcpy(out + k, "...", 3); k += 3; }
    out[k] = 0;
}

/* ================================================================ cl_frames */

void cl_frames_close(cl_frames *f) { for (int i = 0; i < f->n; i++) zmq_msg_close(&f->m[i]); f->n = 0; }

/* one whole multipart message (DONTWAIT); -1 when none */
int cl_frames_recv(void *sock, cl_frames *f) {
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
const void *cl_fd(cl_frames *f, int i) { return zmq_msg_data(&f->m[i]); }
size_t cl_fl(cl_frames *f, int i) { return zmq_msg_size(&f->m[i]); }
int cl_frame_is(cl_frames *f, int i, const char *s) { size_t n = strlen(s); return cl_fl(f, i) == n && !memcmp(cl_fd(f, i), s, n); }

/* [ident] MAGIC type seq body mac: seq and mac only under a session key */
int cl_send_ctl(void *sock, const void *ident, size_t ident_len, const char *type, const void *body, size_t blen,
                    const unsigned char *key, uint64_t seq) {
    unsigned char seqb[8], mac[32];
    size_t maclen = 0;
    put_be64(seqb, seq);
    if (key) {
        cl_part ps[3] = {{type, strlen(type) + 1}, {seqb, 8}, {body, blen}};
        if (cl_hmac(key, 32, ps, 3, mac)) return -1;
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

int cl_send_signed(ld_cluster *c, int to, const char *type, const void *body, size_t blen) {
    cl_peer *p = &c->peers[to];
    p->seq_out++;
    if (c->rank == 0) return cl_send_ctl(c->ctl, p->ident, p->ident_len, type, body, blen, p->key, p->seq_out);
    return cl_send_ctl(c->ctl, NULL, 0, type, body, blen, p->key, p->seq_out);
}

/* check seq and mac of cl_frames [off] MAGIC type seq body mac against peer p */
int cl_verify(cl_peer *p, cl_frames *f, int off) {
    if (cl_fl(f, off + 2) != 8 || cl_fl(f, off + 4) != 32) return -1;
    char type[32];
    size_t tl = cl_fl(f, off + 1);
    if (tl >= sizeof type) return -1;
    memcpy(type, cl_fd(f, off + 1), tl);
    type[tl] = 0;
    unsigned char mac[32];
    cl_part ps[3] = {{type, tl + 1}, {cl_fd(f, off + 2), 8}, {cl_fd(f, off + 3), cl_fl(f, off + 3)}};
    if (cl_hmac(p->key, 32, ps, 3, mac)) return -1;
    if (CRYPTO_memcmp(mac, cl_fd(f, off + 4), 32)) return -1;
    uint64_t seq = get_be64(cl_fd(f, off + 2));
    if (seq <= p->seq_in) return -2;    /* a replay */
    p->seq_in = seq;
    return 0;
}

