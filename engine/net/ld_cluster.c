/* ld_cluster.c - a cluster of processes: joining it (sockets, the control
   thread, the ring), leaving it, the state of its peers as the collectives
   see it, and control messages. The protocol is described in ld_cluster.h;
   the control thread is ld_cluster_ctl.c, the ring ld_ring.c. */
#include "ld_cluster_internal.h"
#include "ld_core.h"

#include <openssl/crypto.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ================================================================ peer state */
void cl_peer_name(ld_cluster *c, int r) {
    cl_peer *p = &c->peers[r];
    snprintf(p->name, sizeof p->name, "%.23s %d (pid %d on %.63s, %.159s)", c->kind, r, p->pid, p->host[0] ? p->host : "?",
             p->data_ep[0] ? p->data_ep : r == 0 ? c->leader_ep : "no data plane");
}

void cl_set_state(ld_cluster *c, int r, int state, const char *reason) {
    pthread_mutex_lock(&c->mu);
    cl_peer *p = &c->peers[r];
    if (p->state != PEER_LOST && p->state != state) {
        p->state = state;
        p->since = cl_now();
        snprintf(p->reason, sizeof p->reason, "%s", reason);
    }
    pthread_mutex_unlock(&c->mu);
}

/* the first peer lost (the cause; later losses are usually its consequences),
   else the first that left */
double cl_tick(ld_cluster *c, double now) {
    pthread_mutex_lock(&c->mu);
    double gap = c->last_tick > 0 ? now - c->last_tick : 0;
    if (gap > c->hb_timeout && c->stalled_s == 0) c->stalled_s = gap;
    if (now > c->last_tick) c->last_tick = now;
    pthread_mutex_unlock(&c->mu);
    return gap;
}

int cl_trouble(ld_cluster *c, int *rank, char *msg, size_t n) {
    int worst = PEER_JOINED, pick = -1;
    pthread_mutex_lock(&c->mu);
    if (c->stalled_s > 0) {         /* the silence was this process's own */
        *rank = c->rank;
        snprintf(msg, n, "this %s, %s, was stopped for %.1f s (SIGSTOP, a debugger or a suspended machine), longer "
                 "than the heartbeat timeout of %.0f s, so the other %ss count it as lost", c->kind, c->peers[c->rank].name,
                 c->stalled_s, c->hb_timeout, c->kind);
        pthread_mutex_unlock(&c->mu);
        return PEER_LOST;
    }
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        int s = c->peers[r].state;
        if (s != PEER_LOST && s != PEER_DONE) continue;
        if (s == PEER_LOST && worst != PEER_LOST) { worst = PEER_LOST; pick = r; continue; }
        if (s == PEER_DONE && worst == PEER_LOST) continue;
        if (pick < 0 || c->peers[r].since < c->peers[pick].since) pick = r;
        worst = s;
    }
    if (pick >= 0) {
        *rank = pick;
        snprintf(msg, n, "%s %s", c->peers[pick].name, c->peers[pick].reason);
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

/* ================================================================ join / free */
static int sock_opt_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

/* "host:port" (or "tcp://host:port") -> "tcp://host:port"; "localhost" is
   127.0.0.1. ZeroMQ binds interfaces and addresses, not names: to bind a
   host name (TF_CONFIG's "worker0.example.com:2222") listen on every
   interface ("*"); peers still connect to the name. */
static int endpoint(const char *addr, char *out, size_t n, const char *what, int bind) {
    if (!addr || !*addr) return ld_fail(LD_EARG, "%s: empty address", what);
    if (!strncmp(addr, "tcp://", 6)) addr += 6;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1]) return ld_fail(LD_EARG, "%s: '%s' is not host:port", what, addr);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535) return ld_fail(LD_EARG, "%s: bad port in '%s'", what, addr);
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    if (!strcmp(host, "localhost")) snprintf(host, sizeof host, "127.0.0.1");
    struct in_addr a4;
    struct in6_addr a6;
    if (bind && strcmp(host, "*") && inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1)
        snprintf(host, sizeof host, "*");
    snprintf(out, n, "tcp://%.180s:%ld", host, port);
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
    cl_shm_close(c);
    /* notices already queued (a lost peer, BYE) still go out */
    if (c->ctl) { sock_opt_int(c->ctl, ZMQ_LINGER, 300); zmq_close(c->ctl); }
    if (c->mon) zmq_close(c->mon);
    ld_guard_free(c->guard);
    if (c->zap) zmq_close(c->zap);
    if (c->pipe_main) zmq_close(c->pipe_main);
    if (c->pipe_thr) zmq_close(c->pipe_thr);
    if (c->zctx) zmq_ctx_term(c->zctx);
    if (c->secret) { OPENSSL_cleanse(c->secret, c->secret_len); free(c->secret); }
    pthread_mutex_destroy(&c->mu);
    cl_control_free(c);
    free(c->peers);
    free(c);
}

/* bytes of kernel socket buffer for the ring (LDIST_RING_SOCKBUF overrides) */
static int ring_sockbuf(void) {
    const char *e = getenv("LDIST_RING_SOCKBUF");
    return e && atoi(e) > 0 ? atoi(e) : 4 << 20;
}

/* wait for READY/FAIL from the control thread */
static int wait_ready(ld_cluster *c, double limit) {
    double t0 = cl_now();
    for (;;) {
        zmq_pollitem_t it = {c->pipe_main, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, 100);
        if (rc > 0) {
            cl_frames f;
            if (cl_frames_recv(c->pipe_main, &f) == 0) {
                int ok = cl_frame_is(&f, 0, "READY");
                char msg[600] = "rendezvous failed";
                if (!ok && f.n > 1) cl_printable(cl_fd(&f, 1), cl_fl(&f, 1), msg, sizeof msg);
                int fail = cl_frame_is(&f, 0, "FAIL");
                cl_frames_close(&f);
                if (ok) return LD_OK;
                if (fail) return ld_fail(LD_EDEVICE, "%s", msg);
            }
        }
        if (ld_interrupt_flag) return ld_fail(LD_EINTERRUPT, "interrupted while joining the cluster");
        char why[300];
        if (c->give_up && c->give_up(c->give_up_ud, why, sizeof why)) return ld_fail(LD_EDEVICE, "%s", why);
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
    c->quiet_loss = o->quiet_loss;
    if (o->mpi) {
        /* MPI carries the collectives: its ranks must be the cluster's */
        int mr, ms;
        if (ld_mpi_init(&mr, &ms)) goto fail;
        if (mr != o->rank || ms != o->size) {
            ld_fail(LD_EARG, "communication=\"mpi\": MPI gives rank %d of %d but the cluster rank %d of %d: "
                    "run every rank under one mpirun or srun", mr, ms, o->rank, o->size);
            goto fail;
        }
        c->mpi = 1;
        c->data_plane = 0;
    }
    snprintf(c->kind, sizeof c->kind, "%s", o->name && *o->name ? o->name : "worker");
    c->timeout = o->timeout > 0 ? o->timeout : 30;
    c->rdv_timeout = o->rendezvous_timeout > 0 ? o->rendezvous_timeout : (c->timeout > 60 ? c->timeout : 60);
    c->give_up = o->give_up;
    c->give_up_ud = o->give_up_ud;
    c->hb = o->heartbeat > 0 ? o->heartbeat : 0.25;
    c->hb_timeout = o->heartbeat_timeout > 0 ? o->heartbeat_timeout : (c->timeout < 5 ? c->timeout : 5);
    if (c->hb_timeout < 2 * c->hb) c->hb_timeout = 2 * c->hb;
    c->chunk_bytes = o->chunk_bytes ? o->chunk_bytes : 1 << 20;
    const char *ce = getenv("LDIST_RING_CHUNK");
    if (ce && atol(ce) >= 1024) c->chunk_bytes = (size_t)atol(ce);
    cl_peer *me = &c->peers[c->rank];
    me->pid = (int)getpid();
    gethostname(me->host, sizeof me->host - 1);
    me->state = PEER_JOINED;
    for (int r = 0; r < c->size; r++) c->peers[r].fd = -1;
    if (c->size == 1) { cl_peer_name(c, 0); return c; }

    if (endpoint(o->leader, c->leader_ep, sizeof c->leader_ep, "the leader's address", 0)) goto fail;
    c->secret = malloc(o->secret_len);
    if (!c->secret) { ld_fail(LD_ENOMEM, "out of memory"); goto fail; }
    memcpy(c->secret, o->secret, o->secret_len);
    c->secret_len = o->secret_len;
    if (!(c->zctx = zmq_ctx_new())) { ld_fail(LD_EDEVICE, "zmq_ctx_new failed"); goto fail; }
    zmq_ctx_set(c->zctx, ZMQ_BLOCKY, 0);
    /* one I/O thread (ZeroMQ's default) measured best for large buffers on 2
       cores; machines with more cores may gain from LDIST_RING_IO_THREADS=2 */
    if (getenv("LDIST_RING_IO_THREADS") && atoi(getenv("LDIST_RING_IO_THREADS")) > 0)
        zmq_ctx_set(c->zctx, ZMQ_IO_THREADS, atoi(getenv("LDIST_RING_IO_THREADS")));
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
            if (endpoint(o->listen, lep, sizeof lep, "this worker's address", 1)) goto fail;
        } else {
            /* the leader's host, any port */
            char tmp[200];
            const char *colon = strrchr(c->leader_ep, ':');
            snprintf(tmp, sizeof tmp, "%.*s:0", (int)(colon - c->leader_ep), c->leader_ep);
            if (endpoint(tmp, lep, sizeof lep, "the leader's address", 1)) goto fail;
        }
        char *pz = strrchr(lep, ':');
        if (pz && !strcmp(pz, ":0")) strcpy(pz, ":*");
        c->pull = zmq_socket(c->zctx, ZMQ_PULL);
        sock_opt_int(c->pull, ZMQ_PLAIN_SERVER, 1);
        zmq_setsockopt(c->pull, ZMQ_ZAP_DOMAIN, "ldist", 5);
        sock_opt_int(c->pull, ZMQ_LINGER, 0);
        sock_opt_int(c->pull, ZMQ_RCVHWM, 0);
        /* large kernel buffers: fewer wake-ups of ZeroMQ's I/O thread per MB
           (measured on loopback: +30% all-reduce bandwidth over the default) */
        sock_opt_int(c->pull, ZMQ_RCVBUF, ring_sockbuf());
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
    cl_peer_name(c, c->rank);

    c->ctl = zmq_socket(c->zctx, c->rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER);
    if (!c->ctl) { ld_fail(LD_EDEVICE, "zmq_socket: %s", zmq_strerror(errno)); goto fail; }
    sock_opt_int(c->ctl, ZMQ_LINGER, 0);
    int64_t maxsz = c->rank == 0 ? MAX_CTL_MSG_LEADER : MAX_CTL_MSG;
    zmq_setsockopt(c->ctl, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
    /* a connection that never finishes ZeroMQ's own handshake is closed */
    if (c->rank == 0) sock_opt_int(c->ctl, ZMQ_HANDSHAKE_IVL, CTL_HANDSHAKE_IVL);
    sock_opt_int(c->ctl, ZMQ_SNDHWM, 0);
    sock_opt_int(c->ctl, ZMQ_RCVHWM, 0);
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://ldist-monitor-%p", (void *)c);
    if (c->rank == 0 && !(c->guard = ld_guard_new("the cluster's control port", c->size - 1 + CTL_UNAUTH_EXTRA,
                                                  CTL_UNAUTH_BYTES, 0, NULL, NULL))) {
        ld_fail(LD_ENOMEM, "out of memory");
        goto fail;
    }
    if (zmq_socket_monitor(c->ctl, mon_ep, c->rank == 0 ? LD_GUARD_EVENTS : ZMQ_EVENT_DISCONNECTED) ||
        !(c->mon = zmq_socket(c->zctx, ZMQ_PAIR)) ||
        zmq_connect(c->mon, mon_ep)) {
        ld_fail(LD_EDEVICE, "cluster: socket monitor: %s", zmq_strerror(errno));
        goto fail;
    }
    sock_opt_int(c->mon, ZMQ_LINGER, 0);
    if (c->rank == 0) {
        char bep[200];
        if (endpoint(c->leader_ep, bep, sizeof bep, "the leader's address", 1)) goto fail;
        if (zmq_bind(c->ctl, bep)) {
            ld_fail(LD_EDEVICE, "cannot listen on %s for the cluster's rendezvous: %s", c->leader_ep + 6, zmq_strerror(errno));
            goto fail;
        }
        ld_random_bytes(c->session, 16);
        unsigned char tok[32];
        cl_part ps[2] = {{"ldist-data", 10}, {c->session, 16}};
        cl_hmac(c->secret, c->secret_len, ps, 2, tok);
        cl_to_hex(tok, 32, c->token);
        c->token_ready = 1;
    } else {
        sock_opt_int(c->ctl, ZMQ_RECONNECT_IVL, 100);
        if (zmq_connect(c->ctl, c->leader_ep)) {
            ld_fail(LD_EDEVICE, "cannot connect to the leader at %s: %s", c->leader_ep + 6, zmq_strerror(errno));
            goto fail;
        }
    }
    if (cl_control_start(c)) goto fail;
    if (wait_ready(c, c->rdv_timeout)) goto fail;
    if (c->data_plane) {
        int next = (c->rank + 1) % c->size;
        c->push = zmq_socket(c->zctx, ZMQ_PUSH);
        char user[16];
        snprintf(user, sizeof user, "%d", c->rank);
        zmq_setsockopt(c->push, ZMQ_PLAIN_USERNAME, user, strlen(user));
        zmq_setsockopt(c->push, ZMQ_PLAIN_PASSWORD, c->token, 64);
        sock_opt_int(c->push, ZMQ_SNDHWM, 0);
        sock_opt_int(c->push, ZMQ_SNDBUF, ring_sockbuf());
        sock_opt_int(c->push, ZMQ_LINGER, 0);
        if (!c->peers[next].data_ep[0] || zmq_connect(c->push, c->peers[next].data_ep)) {
            ld_fail(LD_EDEVICE, "cannot connect to %s: %s", c->peers[next].name, zmq_strerror(errno));
            goto fail;
        }
        /* the shared-memory link where the successor is on this host
           (ld_ring_shm.c): every rank creates its receiving end, a first
           tiny all-reduce over ZeroMQ proves the ring carries data (and that
           every end exists), then senders attach and a second one runs over
           whichever links were taken */
        if (cl_shm_create(c) || ld_cluster_barrier(c)) goto fail;
        cl_shm_listen(c);
        if (cl_shm_attach(c) || ld_cluster_barrier(c)) goto fail;
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

/* The receive loop of ld_cluster_recv and ld_cluster_recv_any: a message
   (1), the timeout (0), or a failure. any: keep waiting when a member is
   lost, give up only when the leader is (members of a parameter-server
   cluster come and go); else any lost peer ends the wait on the leader, and
   the leader's loss ends it everywhere. */
int cl_recv(ld_cluster *c, double timeout, int any, int *from, char type[32], void **data, size_t *n) {
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
            cl_frames f;
            if (cl_frames_recv(c->pipe_main, &f) == 0) {
                if (cl_frame_is(&f, 0, "MSG") && f.n == 4 && cl_fl(&f, 1) == 4 && cl_fl(&f, 2) < 32) {
                    int32_t fr;
                    memcpy(&fr, cl_fd(&f, 1), 4);
                    *from = fr;
                    memcpy(type, cl_fd(&f, 2), cl_fl(&f, 2));
                    type[cl_fl(&f, 2)] = 0;
                    *n = cl_fl(&f, 3);
                    *data = malloc(*n ? *n : 1);
                    if (!*data) { cl_frames_close(&f); return ld_fail(LD_ENOMEM, "out of memory"); }
                    memcpy(*data, cl_fd(&f, 3), *n);
                    cl_frames_close(&f);
                    return 1;
                }
                cl_frames_close(&f);
            }
            continue;
        }
        if (ld_interrupt_flag) return ld_fail(LD_EINTERRUPT, "interrupted");
        if (any) {
            /* a member whose leader is lost has no one left to hear from */
            if (c->rank != 0 && ld_cluster_peer_state(c, 0) == 2) {
                pthread_mutex_lock(&c->mu);
                char msg[512];
                snprintf(msg, sizeof msg, "%s %s", c->peers[0].name, c->peers[0].reason);
                pthread_mutex_unlock(&c->mu);
                return ld_fail(LD_EDEVICE, "%s", msg);
            }
        } else {
            int r;
            char msg[512];
            int t = cl_trouble(c, &r, msg, sizeof msg);
            if (t == PEER_LOST && (c->rank == 0 || r == 0 || r == c->rank)) return ld_fail(LD_EDEVICE, "%s", msg);
        }
        if (cl_now() - t0 >= timeout) return 0;
    }
}

int ld_cluster_recv(ld_cluster *c, double timeout, int *from, char type[32], void **data, size_t *n) {
    return cl_recv(c, timeout, 0, from, type, data, n);
}

