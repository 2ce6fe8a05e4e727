/* ld_cluster_internal.h - what ld_cluster.c (control plane) and ld_ring.c (data
   plane) share; not a public header. */
#ifndef LD_CLUSTER_INTERNAL_H
#define LD_CLUSTER_INTERNAL_H

#include "ld_cluster.h"

#include <pthread.h>
#include <stdint.h>
#include <zmq.h>
#include "ld_guard.h"

#define MAGIC "LDIST/1"             /* first frame of every control message */
#define MAX_FRAMES 8                /* a longer message is malformed */
#define MAX_CTL_MSG (1 << 30)       /* bytes: refuse a larger frame on a member's control socket */
/* bytes: the largest frame the leader's control socket takes. Every frame is
   held whole before anyone knows who sent it, so this bounds the memory a
   stranger can pin per connection before authentication; 256 MiB still
   carries a parameter-server message of 64M float32 values. */
#define MAX_CTL_MSG_LEADER (256 << 20)
#define CTL_HANDSHAKE_IVL 5000      /* ms for a connection's ZMTP handshake on the leader's control port */
/* The leader's connections that have not authenticated (ld_guard.h): they may
   hold this many bytes in all, and there may be CTL_UNAUTH_EXTRA more of them
   than the cluster has members (which connect at once at the rendezvous). */
#define CTL_UNAUTH_BYTES ((int64_t)64 << 20)
#define CTL_UNAUTH_EXTRA 8

enum { PEER_NONE = 0, PEER_JOINED, PEER_LOST, PEER_DONE };

typedef struct {
    int state;                      /* PEER_*; read by the ring under mu */
    int pid;
    char host[64];
    char data_ep[160];              /* "tcp://host:port" of its PULL socket */
    char name[300];                 /* "worker 1 (pid 4242 on host, tcp://...)" */
    char reason[200];               /* why it is lost or done */
    double since;                   /* when state changed (ld_now) */
    /* the connection (leader side: every member; member side: peers[0]) */
    unsigned char ident[256];
    size_t ident_len;
    unsigned char key[32];          /* session key */
    uint64_t seq_out, seq_in;
    double last_seen;
    int fd;                         /* leader side: the TCP connection's descriptor (-1: unknown) */
} cl_peer;

struct ld_cluster {
    int rank, size, data_plane;
    int quiet_loss;                 /* ld_cluster_opts's: lost peers are not logged */
    int mpi;                        /* collectives through MPI (ld_mpi.c), not the ring */
    char kind[24];                  /* "worker" */
    double timeout, rdv_timeout, hb, hb_timeout;
    int (*give_up)(void *ud, char *why, size_t n);   /* ld_cluster_opts's, polled at join */
    void *give_up_ud;
    size_t chunk_bytes;
    unsigned char *secret;
    size_t secret_len;
    char leader_ep[200], listen_ep[200];

    void *zctx;
    void *pipe_main, *pipe_thr;     /* inproc PAIR: Lua thread <-> control thread */
    void *ctl;                      /* leader: ROUTER; member: DEALER (control thread) */
    void *zap;                      /* ZAP handler (control thread) */
    void *mon;                      /* events of ctl: a closed connection is a lost peer at once */
    void *pull, *push;              /* the ring (calling thread) */
    pthread_t thr;
    int thr_running;
    void *ts;                       /* the control thread's state */

    cl_peer *peers;                 /* [size]; peers[rank] is this process */
    unsigned char session[16];
    char token[65];                 /* data-plane password, hex */
    int token_ready;

    struct ld_guard *guard;         /* leader: limits on unauthenticated connections to ctl */
    pthread_mutex_t mu;             /* peers[].state/reason/since, broken */
    double last_tick;               /* cl_now() of the last cl_tick (0: none yet) */
    double stalled_s;               /* > 0: this process did not run for so long (stopped, suspended) */
    int broken;                     /* a collective failed: the ranks disagree now */
    int broken_status;
    char broken_msg[512];

    uint64_t coll_seq;              /* collectives issued */
    int inflight;                   /* zero-copy sends not yet released (atomic) */
    struct cl_shm *shm_rx, *shm_tx; /* shared-memory links of the ring (same host), or NULL */
    ld_cluster_stats stats;
};

/* ---- ld_cluster_wire.c ---- */
double cl_now(void);
void cl_to_hex(const unsigned char *b, size_t n, char *out);
int cl_from_hex(const char *s, unsigned char *out, size_t n);          /* 0, or -1 when not n bytes of hex */
typedef struct { const void *p; size_t n; } cl_part;
/* HMAC-SHA256 of the concatenated parts; 0 or -1 */
int cl_hmac(const void *key, size_t klen, const cl_part *parts, int np, unsigned char out[32]);
/* the value of "key=" in a body of "key=value" lines; -1 when absent or too long */
int cl_kv_get(const char *body, size_t n, const char *key, char *out, size_t outn);
int cl_kv_int(const char *body, size_t n, const char *key, long lo, long hi, long *v);
void cl_printable(const void *p, size_t n, char *out, size_t outn);     /* untrusted bytes for a log line */
typedef struct { zmq_msg_t m[MAX_FRAMES]; int n; int too_many; } cl_frames;
int cl_frames_recv(void *sock, cl_frames *f);                           /* one whole message (DONTWAIT); -1: none */
void cl_frames_close(cl_frames *f);
const void *cl_fd(cl_frames *f, int i);
size_t cl_fl(cl_frames *f, int i);
int cl_frame_is(cl_frames *f, int i, const char *s);
/* [ident] MAGIC type seq body mac (seq and mac only with a session key) */
int cl_send_ctl(void *sock, const void *ident, size_t ident_len, const char *type, const void *body, size_t blen,
                const unsigned char *key, uint64_t seq);
int cl_send_signed(ld_cluster *c, int to, const char *type, const void *body, size_t blen);
/* seq and mac of frames [off..] from peer p: 0, -1 bad signature, -2 replay */
int cl_verify(cl_peer *p, cl_frames *f, int off);

/* ---- ld_ring_shm.c: the ring's link between ranks on one host ---- */
typedef struct cl_shm cl_shm;
int cl_shm_create(ld_cluster *c);        /* this rank's receiving segment (none: stays on ZeroMQ) */
int cl_shm_attach(ld_cluster *c);        /* the successor's segment, when it is on this host */
void cl_shm_close(ld_cluster *c);
void cl_shm_listen(ld_cluster *c);       /* receive on it once the sender attaches (after the first barrier) */
int cl_shm_attached(const cl_shm *s);    /* listening, and the sender uses it */
/* 1 queued, 0 full (try again), -1 too large */
int cl_shm_send(cl_shm *s, const void *meta, size_t mlen, const void *data, size_t n);
/* memcpy split over the calling thread's CPU pool when large (ld_ring.c) */
void cl_copy_par(void *dst, const void *src, size_t bytes);
/* the oldest chunk (its meta copied out), or NULL when none; cl_shm_release frees its slot */
const void *cl_shm_recv(cl_shm *s, void *meta, size_t mlen, size_t *n);
void cl_shm_release(cl_shm *s);

/* ---- ld_cluster_ctl.c ---- */
int cl_control_start(ld_cluster *c);
void cl_control_free(ld_cluster *c);                                   /* after the thread stopped */

/* ---- ld_cluster.c ---- */
void cl_peer_name(ld_cluster *c, int r);                                /* (re)make peers[r].name */
void cl_set_state(ld_cluster *c, int r, int state, const char *reason);
/* A peer in trouble: PEER_LOST (fail now) or PEER_DONE (fail after a grace),
   with its rank and a message; PEER_JOINED when every peer is fine. */
int cl_trouble(ld_cluster *c, int *rank, char *msg, size_t n);
/* Called by the control thread at every wake-up (a heartbeat period at most
   apart) and by waiting collectives: a gap longer than the heartbeat timeout
   since the last call means this process itself did not run (SIGSTOP, a
   debugger, a suspended machine), so its peers count it as lost, and from
   then on cl_trouble names this process, not the peers it did not hear from.
   Returns the gap in seconds. */
double cl_tick(ld_cluster *c, double now);
/* Mark the cluster broken with the current error (ld_error()). */
int cl_break(ld_cluster *c, int status);
void cl_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* cl_log for what strangers can cause (rejected messages): at most
   CL_LOG_RATE lines a second in all; the rest are counted and summed up in
   one line when logging resumes. */
#define CL_LOG_RATE 20
void cl_log_rejected(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cl_log_rejected_flush(void);   /* the count of the unlogged, once their second is over */

/* the receive loop shared by ld_cluster_recv (any 0) and ld_cluster_recv_any (any 1) */
int cl_recv(ld_cluster *c, double timeout, int any, int *from, char type[32], void **data, size_t *n);

#endif
