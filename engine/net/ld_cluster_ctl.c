/* ld_cluster_ctl.c - the control thread of a cluster: the rendezvous and
   its mutual authentication (leader and member sides), signed messages,
   heartbeats and lost peers, the socket monitor that notices a closed
   connection at once, and the ZAP handler that guards the ring. */
#include "ld_cluster_internal.h"
#include "ld_core.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PENDING 64              /* handshakes in progress at once (leader) */
#define HANDSHAKE_TIMEOUT 5.0       /* seconds from HELLO to AUTH before the slot is freed */

typedef struct {
    int used, rank, size, pid;
    unsigned char ident[256];
    size_t ident_len;
    char host[64], data_ep[160], addr[64];
    unsigned char nl[16], nm[16];
    double t;
    int fd;
} pending;

typedef struct {
    ld_cluster *c;
    pending pend[MAX_PENDING];
    int ready, failed;
    unsigned char nm[16], nl[16];   /* member: its nonce, the leader's */
    int member_state;               /* 0 hello sent, 1 authed (waiting for WELCOME), 2 welcomed (waiting
                                       for START), 3 ready */
    int welcomed;                   /* leader: WELCOME sent; acks[] counts the answers */
    int leader_proved;              /* member: a message signed with the session key came from the leader */
    double hello_at, hello_wait;    /* member: when HELLO was last sent, and how long to wait before again */
    unsigned char *acks;
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

static void peer_addr(cl_frames *f, int i, char *out, size_t n) {
    const char *a = zmq_msg_gets(&f->m[i], "Peer-Address");
    snprintf(out, n, "%s", a ? a : "an unknown address");
}

static void deliver_app(ld_cluster *c, int from, cl_frames *f, int off) {
    /* body: app type, NUL, payload */
    const char *b = cl_fd(f, off + 3);
    size_t n = cl_fl(f, off + 3);
    const char *z = memchr(b, 0, n < 32 ? n : 32);
    if (!z) { cl_log("rejected an application message without a type from %s", c->peers[from].name); return; }
    /* the leader asks this process to stop what it is doing (LocalCluster's
       Ctrl-C): the flag ends every wait in the engine */
    if (from == 0 && c->rank != 0 && !strcmp(b, "__interrupt__")) { ld_interrupt_flag = 1; return; }
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
        if (q != r && c->peers[q].state == PEER_JOINED) cl_send_signed(c, q, "FAILED", body, strlen(body));
}

static void leader_welcome(thr_state *s) {
    ld_cluster *c = s->c;
    char *body = malloc((size_t)c->size * 400 + 128);
    if (!body) { thr_fail(s, "out of memory"); return; }
    size_t k = 0;
    char hex[33];
    cl_to_hex(c->session, 16, hex);
    k += (size_t)sprintf(body + k, "session=%s\n", hex);
    for (int r = 0; r < c->size; r++) {
        cl_peer *p = &c->peers[r];
        k += (size_t)sprintf(body + k, "peer%d=%d %s %s\n", r, p->pid, p->host, p->data_ep[0] ? p->data_ep : "-");
    }
    for (int r = 1; r < c->size; r++) cl_send_signed(c, r, "WELCOME", body, k);
    free(body);
    s->welcomed = 1;
}

/* Every member has the session's ring password (it answered WELCOME): only
   now may rings connect, or a ZAP handler could see a password it does not
   know yet. */
static void leader_start(thr_state *s) {
    ld_cluster *c = s->c;
    for (int r = 1; r < c->size; r++) cl_send_signed(c, r, "START", "", 0);
    s->ready = 1;
    double now = cl_now();
    for (int r = 1; r < c->size; r++) c->peers[r].last_seen = now;
    to_main(c, "READY", NULL);
}

static pending *find_pending(thr_state *s, cl_frames *f) {
    for (int i = 0; i < MAX_PENDING; i++) {
        pending *p = &s->pend[i];
        if (p->used && p->ident_len == cl_fl(f, 0) && !memcmp(p->ident, cl_fd(f, 0), p->ident_len)) return p;
    }
    return NULL;
}

static void refuse(ld_cluster *c, cl_frames *f, const char *why) {
    cl_send_ctl(c->ctl, cl_fd(f, 0), cl_fl(f, 0), "REFUSED", why, strlen(why), NULL, 0);
}

/* Only a nonce: the member proves it knows the secret first, and the leader
   proves it with its first signed message (JOINED, keyed by the session
   key), so a stranger who connects gets nothing computed from the secret to
   guess it against offline. */
static void send_challenge(ld_cluster *c, const pending *p) {
    char out[200], h1[33];
    cl_to_hex(p->nl, 16, h1);
    int n = snprintf(out, sizeof out, "nonce=%s\n", h1);
    cl_send_ctl(c->ctl, p->ident, p->ident_len, "CHALLENGE", out, (size_t)n, NULL, 0);
}

static void leader_handshake(thr_state *s, cl_frames *f, const char *addr) {
    ld_cluster *c = s->c;
    const char *body = cl_fd(f, 4);
    size_t blen = cl_fl(f, 4);
    if (cl_frame_is(f, 2, "HELLO")) {
        long rank, size, pid;
        char host[64], data[160], nonce[40];
        if (cl_kv_int(body, blen, "rank", 0, 1 << 20, &rank) || cl_kv_int(body, blen, "size", 1, 1 << 20, &size) ||
            cl_kv_int(body, blen, "pid", 0, 1L << 30, &pid) || cl_kv_get(body, blen, "host", host, sizeof host) ||
            cl_kv_get(body, blen, "data", data, sizeof data) || cl_kv_get(body, blen, "nonce", nonce, sizeof nonce)) {
            cl_log_rejected("rejected a malformed HELLO from %s", addr);
            return;
        }
        /* Nothing here is believed or answered in detail before the peer
           proves the secret: the rank and size are checked after AUTH, so a
           stranger learns nothing about the cluster. A stranger cannot hold
           the rendezvous either: when every slot is taken, the oldest
           handshake makes room (a real member answers its CHALLENGE within a
           round trip; a slot held by one that never answers is the first to
           go), and slots time out after HANDSHAKE_TIMEOUT. */
        unsigned char nm[16];
        if (cl_from_hex(nonce, nm, 16)) { cl_log_rejected("rejected a malformed HELLO from %s (nonce)", addr); return; }
        pending *p = find_pending(s, f);
        if (p && !memcmp(p->nm, nm, 16)) {
            /* the same HELLO again (a member repeats it until it hears a
               CHALLENGE): the same CHALLENGE again, so that whichever copy
               it answers, its proof matches this slot */
            p->t = cl_now();
            send_challenge(c, p);
            return;
        }
        for (int i = 0; i < MAX_PENDING && !p; i++) if (!s->pend[i].used) p = &s->pend[i];
        if (!p) {
            p = &s->pend[0];
            for (int i = 1; i < MAX_PENDING; i++) if (s->pend[i].t < p->t) p = &s->pend[i];
            cl_log_rejected("dropped the oldest handshake in progress (from %s) for one from %s: %d handshakes at once",
                            p->addr, addr, MAX_PENDING);
        }
        memset(p, 0, sizeof *p);
        memcpy(p->nm, nm, 16);
        p->used = 1;
        p->rank = (int)rank;
        p->size = (int)size;
        p->pid = (int)pid;
        p->ident_len = cl_fl(f, 0) < sizeof p->ident ? cl_fl(f, 0) : sizeof p->ident;
        memcpy(p->ident, cl_fd(f, 0), p->ident_len);
        snprintf(p->host, sizeof p->host, "%s", host);
        snprintf(p->data_ep, sizeof p->data_ep, "%s", strcmp(data, "-") ? data : "");
        snprintf(p->addr, sizeof p->addr, "%s", addr);
        p->t = cl_now();
        p->fd = zmq_msg_get(&f->m[1], ZMQ_SRCFD);
        ld_random_bytes(p->nl, 16);
        send_challenge(c, p);
        return;
    }
    /* AUTH */
    pending *p = find_pending(s, f);
    if (!p) { cl_log_rejected("rejected an AUTH without a HELLO from %s", addr); return; }
    char proofh[80];
    unsigned char got[32], want[32];
    int32_t r32 = p->rank;
    cl_part ps[4] = {{"ldist-member", 12}, {p->nl, 16}, {p->nm, 16}, {&r32, 4}};
    if (cl_kv_get(body, blen, "proof", proofh, sizeof proofh) || cl_from_hex(proofh, got, 32) ||
        cl_hmac(c->secret, c->secret_len, ps, 4, want) || CRYPTO_memcmp(got, want, 32)) {
        cl_log_rejected("refused a connection from %s claiming %s %d: it does not know the cluster secret", p->addr, c->kind, p->rank);
        refuse(c, f, "authentication failed: wrong cluster secret");
        p->used = 0;
        return;
    }
    /* it knows the secret: now it may hear why it cannot join */
    if (p->size != c->size || p->rank < 1 || p->rank >= c->size) {
        char why[160];
        snprintf(why, sizeof why, "this cluster has %d ranks (the leader is rank 0); you said rank %d of %d",
                 c->size, p->rank, p->size);
        cl_log("refused a connection from %s: %s", p->addr, why);
        refuse(c, f, why);
        p->used = 0;
        return;
    }
    if (c->peers[p->rank].state != PEER_NONE) {
        char why[400];
        snprintf(why, sizeof why, "rank %d has already joined (%s)", p->rank, c->peers[p->rank].name);
        cl_log("refused a connection from %s: %s", p->addr, why);
        refuse(c, f, why);
        p->used = 0;
        return;
    }
    cl_peer *q = &c->peers[p->rank];
    cl_part ks[3] = {{"ldist-session", 13}, {p->nl, 16}, {p->nm, 16}};
    cl_hmac(c->secret, c->secret_len, ks, 3, q->key);
    memcpy(q->ident, p->ident, p->ident_len);
    q->ident_len = p->ident_len;
    q->pid = p->pid;
    snprintf(q->host, sizeof q->host, "%s", p->host);
    snprintf(q->data_ep, sizeof q->data_ep, "%s", p->data_ep);
    q->seq_in = q->seq_out = 0;
    q->last_seen = cl_now();
    q->fd = p->fd;
    ld_guard_trust(c->guard, q->fd);    /* it proved the secret: no limit on its connection */
    cl_peer_name(c, p->rank);
    pthread_mutex_lock(&c->mu);
    q->state = PEER_JOINED;
    pthread_mutex_unlock(&c->mu);
    p->used = 0;
    cl_send_signed(c, p->rank, "JOINED", "", 0);
    int joined = 1;
    for (int r = 1; r < c->size; r++) joined += c->peers[r].state == PEER_JOINED;
    if (joined == c->size && !s->welcomed) leader_welcome(s);
}

static int find_peer_by_ident(ld_cluster *c, cl_frames *f) {
    for (int r = 1; r < c->size; r++) {
        cl_peer *p = &c->peers[r];
        if (p->state != PEER_NONE && p->ident_len == cl_fl(f, 0) && !memcmp(p->ident, cl_fd(f, 0), p->ident_len)) return r;
    }
    return -1;
}

static void leader_message(thr_state *s) {
    ld_cluster *c = s->c;
    cl_frames f;
    while (cl_frames_recv(c->ctl, &f) == 0) {
        char addr[64] = "?";
        if (f.n > 1) peer_addr(&f, 1, addr, sizeof addr);
        if (f.too_many || f.n != 6 || !cl_frame_is(&f, 1, MAGIC) || cl_fl(&f, 2) >= 32) {
            cl_log_rejected("rejected a malformed control message from %s (%d frames%s)", addr, f.n,
                   f.n > 1 && !cl_frame_is(&f, 1, MAGIC) ? ", not an ldist message" : "");
            cl_frames_close(&f);
            continue;
        }
        char type[32];
        cl_printable(cl_fd(&f, 2), cl_fl(&f, 2), type, sizeof type);
        if (cl_frame_is(&f, 2, "HELLO") || cl_frame_is(&f, 2, "AUTH")) {
            /* a member repeats HELLO until its JOINED arrives (member_repeat_hello):
               a copy on a connection that has authenticated needs no answer */
            if (find_peer_by_ident(c, &f) >= 0) {
                if (!cl_frame_is(&f, 2, "HELLO")) cl_log_rejected("rejected a second %s on an authenticated connection from %s", type, addr);
            } else {
                leader_handshake(s, &f, addr);
            }
            cl_frames_close(&f);
            continue;
        }
        int r = find_peer_by_ident(c, &f);
        if (r < 0) {
            cl_log_rejected("rejected an unauthenticated %s message from %s", type, addr);
            cl_frames_close(&f);
            continue;
        }
        cl_peer *p = &c->peers[r];
        int v = cl_verify(p, &f, 1);
        if (v) {
            cl_log_rejected("rejected a %s message from %s: %s", type, p->name, v == -2 ? "replayed" : "bad signature");
            cl_frames_close(&f);
            continue;
        }
        p->last_seen = cl_now();
        if (cl_frame_is(&f, 2, "HB")) {
        } else if (cl_frame_is(&f, 2, "WELCOMED") && s->welcomed && !s->ready) {
            if (!s->acks) s->acks = calloc((size_t)c->size, 1);
            if (s->acks) s->acks[r] = 1;
            int all = s->acks != NULL;
            for (int q = 1; q < c->size && all; q++) all = s->acks[q];
            if (all) leader_start(s);
        } else if (cl_frame_is(&f, 2, "BYE")) {
            notice_failed(c, r, "done", "has left the cluster (its program ended)");
            cl_set_state(c, r, PEER_DONE, "has left the cluster (its program ended)");
        } else if (cl_frame_is(&f, 2, "APP")) {
            deliver_app(c, r, &f, 1);
        } else {
            cl_log("rejected a message of unknown type '%s' from %s", type, p->name);
        }
        cl_frames_close(&f);
    }
}

static void member_hello(thr_state *s) {
    ld_cluster *c = s->c;
    cl_peer *me = &c->peers[c->rank];
    char body[600], hex[33];
    cl_to_hex(s->nm, 16, hex);   /* made once (control_main): a repeated HELLO carries the same */
    int n = snprintf(body, sizeof body, "rank=%d\nsize=%d\npid=%d\nhost=%s\ndata=%s\nnonce=%s\n", c->rank, c->size,
                     me->pid, me->host, me->data_ep[0] ? me->data_ep : "-", hex);
    cl_send_ctl(c->ctl, NULL, 0, "HELLO", body, (size_t)n, NULL, 0);
    s->hello_at = cl_now();
}

/* A HELLO or AUTH can be lost with its connection: the leader closes the
   oldest connections that have not authenticated when strangers crowd its
   port, and ZeroMQ reconnects without the messages it had written. So until
   the leader has proved itself (JOINED), the member says HELLO again after
   0.25 s, then 0.5, 1, 2, 4 s; the leader answers a repeat with the same
   CHALLENGE, and a CHALLENGE with a new nonce (a new connection's
   handshake) gets a new AUTH. */
static void member_repeat_hello(thr_state *s, double now) {
    if (s->c->rank == 0 || s->leader_proved || s->failed || now - s->hello_at < s->hello_wait) return;
    member_hello(s);
    s->hello_wait = s->hello_wait < 2.0 ? 2 * s->hello_wait : 4.0;
}

static void member_welcome(thr_state *s, const char *body, size_t n) {
    ld_cluster *c = s->c;
    char hex[40], key[16], val[300];
    if (cl_kv_get(body, n, "session", hex, sizeof hex) || cl_from_hex(hex, c->session, 16)) {
        thr_fail(s, "the leader sent a malformed WELCOME");
        return;
    }
    for (int r = 0; r < c->size; r++) {
        snprintf(key, sizeof key, "peer%d", r);
        char host[64], ep[160];
        int pid;
        if (cl_kv_get(body, n, key, val, sizeof val) || sscanf(val, "%d %63s %159s", &pid, host, ep) != 3) {
            thr_fail(s, "the leader sent a malformed WELCOME (%s)", key);
            return;
        }
        cl_peer *p = &c->peers[r];
        p->pid = pid;
        snprintf(p->host, sizeof p->host, "%s", host);
        snprintf(p->data_ep, sizeof p->data_ep, "%s", strcmp(ep, "-") ? ep : "");
        cl_peer_name(c, r);
        pthread_mutex_lock(&c->mu);
        p->state = PEER_JOINED;
        pthread_mutex_unlock(&c->mu);
    }
    unsigned char tok[32];
    cl_part ps[2] = {{"ldist-data", 10}, {c->session, 16}};
    cl_hmac(c->secret, c->secret_len, ps, 2, tok);
    cl_to_hex(tok, 32, c->token);
    __atomic_store_n(&c->token_ready, 1, __ATOMIC_RELEASE);
    c->peers[0].last_seen = cl_now();
    s->member_state = 2;
    cl_send_signed(c, 0, "WELCOMED", "", 0);
}

static void member_message(thr_state *s) {
    ld_cluster *c = s->c;
    cl_peer *L = &c->peers[0];
    cl_frames f;
    while (cl_frames_recv(c->ctl, &f) == 0) {
        if (f.too_many || f.n != 5 || !cl_frame_is(&f, 0, MAGIC) || cl_fl(&f, 1) >= 32) {
            cl_log("rejected a malformed control message from the leader (%d cl_frames)", f.n);
            cl_frames_close(&f);
            continue;
        }
        const char *body = cl_fd(&f, 3);
        size_t blen = cl_fl(&f, 3);
        if (cl_frame_is(&f, 1, "CHALLENGE")) {
            char nh[40];
            int32_t r32 = c->rank;
            unsigned char nl[16];
            if (s->member_state > 1 || s->leader_proved) {
                /* a late copy, after the leader proved itself */
            } else if (cl_kv_get(body, blen, "nonce", nh, sizeof nh) || cl_from_hex(nh, nl, 16)) {
                cl_log("rejected a malformed CHALLENGE from the leader");
            } else if (s->member_state == 1 && !memcmp(nl, s->nl, 16)) {
                /* the answer to a repeated HELLO: AUTH went already */
            } else {
                memcpy(s->nl, nl, 16);
                /* this member proves the secret first; the leader proves it
                   by signing JOINED with the session key (checked below) */
                cl_part pm[4] = {{"ldist-member", 12}, {s->nl, 16}, {s->nm, 16}, {&r32, 4}};
                unsigned char proof[32];
                char out[100], h[65];
                cl_hmac(c->secret, c->secret_len, pm, 4, proof);
                cl_to_hex(proof, 32, h);
                int n = snprintf(out, sizeof out, "proof=%s\n", h);
                cl_part ks[3] = {{"ldist-session", 13}, {s->nl, 16}, {s->nm, 16}};
                cl_hmac(c->secret, c->secret_len, ks, 3, L->key);
                L->seq_in = L->seq_out = 0;
                cl_send_ctl(c->ctl, NULL, 0, "AUTH", out, (size_t)n, NULL, 0);
                s->member_state = 1;
            }
            cl_frames_close(&f);
            continue;
        }
        if (s->member_state <= 1 && cl_frame_is(&f, 1, "REFUSED")) {
            char why[300];
            cl_printable(body, blen, why, sizeof why);
            thr_fail(s, "the leader at %s refused this %s: %s", c->leader_ep, c->kind, why);
            cl_frames_close(&f);
            continue;
        }
        if (s->member_state == 0) {
            cl_log("rejected an unexpected message before authentication");
            cl_frames_close(&f);
            continue;
        }
        char type[32];
        cl_printable(cl_fd(&f, 1), cl_fl(&f, 1), type, sizeof type);
        int v = cl_verify(L, &f, 0);
        if (v && s->member_state == 1 && !s->leader_proved) {
            /* the first signed message is the leader's proof of the secret */
            thr_fail(s, "the leader at %s does not know the cluster secret: refusing to join it", c->leader_ep);
            cl_frames_close(&f);
            continue;
        }
        if (v) {
            cl_log("rejected a %s message from the leader: %s", type, v == -2 ? "replayed" : "bad signature");
            cl_frames_close(&f);
            continue;
        }
        L->last_seen = cl_now();
        s->leader_proved = 1;
        if (cl_frame_is(&f, 1, "JOINED") || cl_frame_is(&f, 1, "HB")) {
        } else if (cl_frame_is(&f, 1, "WELCOME") && s->member_state == 1) {
            member_welcome(s, body, blen);
        } else if (cl_frame_is(&f, 1, "START") && s->member_state == 2) {
            s->member_state = 3;
            s->ready = 1;
            to_main(c, "READY", NULL);
        } else if (cl_frame_is(&f, 1, "FAILED")) {
            long r;
            char kind[16], reason[200];
            if (cl_kv_int(body, blen, "rank", 0, c->size - 1, &r) || cl_kv_get(body, blen, "kind", kind, sizeof kind) ||
                cl_kv_get(body, blen, "reason", reason, sizeof reason))
                cl_log("rejected a malformed FAILED notice from the leader");
            else if (r != c->rank) {
                if (!strcmp(kind, "lost") && !c->quiet_loss) cl_log("the leader reports %s %s", c->peers[r].name, reason);
                cl_set_state(c, (int)r, strcmp(kind, "lost") ? PEER_DONE : PEER_LOST, reason);
            }
        } else if (cl_frame_is(&f, 1, "BYE")) {
            cl_set_state(c, 0, PEER_DONE, "has left the cluster (its program ended)");
        } else if (cl_frame_is(&f, 1, "APP") && s->ready) {
            deliver_app(c, 0, &f, 0);
        } else {
            cl_log("rejected a message of unknown type '%s' from the leader", type);
        }
        cl_frames_close(&f);
    }
}

/* ZAP: the ring's PLAIN password must be this session's token */
static void zap_request(ld_cluster *c) {
    cl_frames f;
    if (cl_frames_recv(c->zap, &f) < 0) return;
    const char *status = "400", *text = "refused";
    if (f.n >= 6) {
        if (cl_frame_is(&f, 5, "NULL")) status = "200", text = "OK";
        else if (cl_frame_is(&f, 5, "PLAIN") && f.n >= 8) {
            if (__atomic_load_n(&c->token_ready, __ATOMIC_ACQUIRE) && cl_fl(&f, 7) == 64 &&
                !CRYPTO_memcmp(cl_fd(&f, 7), c->token, 64))
                status = "200", text = "OK";
            else {
                char addr[64];
                cl_printable(cl_fd(&f, 3), cl_fl(&f, 3), addr, sizeof addr);
                cl_log("refused a data-plane connection from %s: wrong password", addr);
            }
        }
    }
    zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(c->zap, f.n > 1 ? cl_fd(&f, 1) : "", f.n > 1 ? cl_fl(&f, 1) : 0, ZMQ_SNDMORE);
    zmq_send(c->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(c->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(c->zap, "", 0, 0);
    cl_frames_close(&f);
}

/* commands from the calling thread; returns 1 on STOP */
static int pipe_command(thr_state *s) {
    ld_cluster *c = s->c;
    cl_frames f;
    int stop = 0;
    while (cl_frames_recv(c->pipe_thr, &f) == 0) {
        if (cl_frame_is(&f, 0, "STOP")) stop = 1;
        else if (cl_frame_is(&f, 0, "BYE") && s->ready) {
            if (c->rank == 0) { for (int r = 1; r < c->size; r++) if (c->peers[r].state == PEER_JOINED) cl_send_signed(c, r, "BYE", "", 0); }
            else cl_send_signed(c, 0, "BYE", "", 0);
        } else if (cl_frame_is(&f, 0, "SEND") && f.n == 4 && cl_fl(&f, 1) == 4) {
            int32_t to;
            memcpy(&to, cl_fd(&f, 1), 4);
            /* body: type NUL payload */
            size_t tl = cl_fl(&f, 2), pl = cl_fl(&f, 3);
            char *body = malloc(tl + 1 + pl + 1);
            if (body) {
                memcpy(body, cl_fd(&f, 2), tl);
                body[tl] = 0;
                memcpy(body + tl + 1, cl_fd(&f, 3), pl);
                if (to >= 0 && to < c->size && to != c->rank && c->peers[to].state == PEER_JOINED) cl_send_signed(c, to, "APP", body, tl + 1 + pl);
                free(body);
            }
        }
        cl_frames_close(&f);
        if (stop) break;
    }
    return stop;
}

static void heartbeat(thr_state *s, double now) {
    ld_cluster *c = s->c;
    if (now >= s->next_hb) {
        s->next_hb = now + c->hb;
        if (c->rank == 0) { for (int r = 1; r < c->size; r++) if (c->peers[r].state == PEER_JOINED) cl_send_signed(c, r, "HB", "", 0); }
        else if (s->member_state >= 1) cl_send_signed(c, 0, "HB", "", 0);
    }
    if (!s->ready || c->stalled_s > 0) return;      /* after this process's own stall the peers are not to blame */
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank || (c->rank != 0 && r != 0)) continue;
        cl_peer *p = &c->peers[r];
        if (p->state == PEER_JOINED && now - p->last_seen > c->hb_timeout) {
            char why[200];
            snprintf(why, sizeof why, "is lost: no heartbeat for %.1f s (killed, crashed or hung)", now - p->last_seen);
            cl_log("%s %s", p->name, why);   /* a hung process: no supervisor sees it, so even quiet_loss logs it */
            if (c->rank == 0) notice_failed(c, r, "lost", why);
            cl_set_state(c, r, PEER_LOST, why);
        }
    }
}

/* a closed TCP connection: the peer's process is gone (a normal exit says
   BYE first, so its peer is already done) */
static void monitor_event(thr_state *s) {
    ld_cluster *c = s->c;
    cl_frames f;
    while (cl_frames_recv(c->mon, &f) == 0) {
        if (f.n >= 1) ld_guard_event(c->guard, cl_fd(&f, 0), cl_fl(&f, 0));
        if (f.n >= 1 && cl_fl(&f, 0) >= 6) {
            uint16_t ev;
            int32_t fd;
            memcpy(&ev, cl_fd(&f, 0), 2);
            memcpy(&fd, (const char *)cl_fd(&f, 0) + 2, 4);
            if (ev == ZMQ_EVENT_DISCONNECTED && s->ready) {
                for (int r = 0; r < c->size; r++) {
                    cl_peer *p = &c->peers[r];
                    if (r == c->rank || p->state != PEER_JOINED) continue;
                    if (c->rank == 0 ? p->fd != fd || fd < 0 : r != 0) continue;
                    const char *why = "is lost: its connection closed (the process exited without leaving, or was killed)";
                    if (!c->quiet_loss) cl_log("%s %s", p->name, why);
                    if (c->rank == 0) notice_failed(c, r, "lost", why);
                    cl_set_state(c, r, PEER_LOST, why);
                }
            }
        }
        cl_frames_close(&f);
    }
}

static void *control_main(void *arg) {
    thr_state *s = arg;
    ld_cluster *c = s->c;
    s->start = cl_now();
    s->hello_wait = 0.25;
    if (c->rank != 0) {
        ld_random_bytes(s->nm, 16);
        member_hello(s);
    }
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
                const char *kind = c->kind, *plural = strcmp(kind, "process") == 0 ? "es" : "s";
                thr_fail(s, "rendezvous at %s: only %d of %d %s%s joined within %.0f s (missing: %s %s)", c->leader_ep,
                         c->size - nmiss, c->size, kind, plural, c->rdv_timeout, kind, missing);
            } else {
                thr_fail(s, "rendezvous: no %s from the leader (%s 0 at %s) within %.0f s", s->member_state ? "start signal" : "answer",
                         c->kind, c->leader_ep, c->rdv_timeout);
            }
        }
        zmq_pollitem_t it[4] = {{c->ctl, 0, ZMQ_POLLIN, 0}, {c->pipe_thr, 0, ZMQ_POLLIN, 0}, {c->mon, 0, ZMQ_POLLIN, 0},
                                {c->zap, 0, ZMQ_POLLIN, 0}};
        int nit = c->zap ? 4 : 3;
        double wait = s->next_hb - now;
        if (wait > c->hb) wait = c->hb;
        /* strangers connected: check what they sent every 20 ms */
        if (c->guard && wait > 0.02 && ld_guard_untrusted(c->guard, NULL) > 0) wait = 0.02;
        if (c->rank != 0 && !s->leader_proved && wait > s->hello_at + s->hello_wait - now)
            wait = s->hello_at + s->hello_wait - now;
        if (wait < 0.001) wait = 0.001;
        int rc = zmq_poll(it, nit, (long)(wait * 1000) + 1);
        /* before any message: a long gap here is this process's own stall;
           a shorter one gives every peer a fresh heartbeat window, as it
           was this process that could not listen */
        if (cl_tick(c, cl_now()) > 2 * c->hb + 0.5)
            for (int r = 0; r < c->size; r++) c->peers[r].last_seen = cl_now();
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
        if (it[2].revents & ZMQ_POLLIN) monitor_event(s);
        if (nit == 4 && (it[3].revents & ZMQ_POLLIN)) zap_request(c);
        /* handshakes that stalled */
        now = cl_now();
        for (int i = 0; i < MAX_PENDING; i++)
            if (s->pend[i].used && now - s->pend[i].t > HANDSHAKE_TIMEOUT) s->pend[i].used = 0;
        heartbeat(s, now);
        member_repeat_hello(s, now);
        ld_guard_enforce(c->guard);
        cl_log_rejected_flush();
    }
    cl_log_rejected_flush();
    return NULL;
}

void cl_control_free(ld_cluster *c) {
    thr_state *s = c->ts;
    if (s) free(s->acks);
    free(s);
    c->ts = NULL;
}

int cl_control_start(ld_cluster *c) {
    thr_state *s = calloc(1, sizeof *s);
    if (!s) return ld_fail(LD_ENOMEM, "out of memory");
    s->c = c;
    c->ts = s;                      /* freed with the cluster */
    if (pthread_create(&c->thr, NULL, control_main, s)) return ld_fail(LD_EDEVICE, "cannot start the cluster thread");
    c->thr_running = 1;
    return LD_OK;
}
