/* ld_cluster_int.h - what ld_cluster.c (control plane) and ld_ring.c (data
   plane) share; not a public header. */
#ifndef LD_CLUSTER_INT_H
#define LD_CLUSTER_INT_H

#include "ld_cluster.h"

#include <pthread.h>
#include <stdint.h>

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
} cl_peer;

struct ld_cluster {
    int rank, size, data_plane;
    char kind[24];                  /* "worker" */
    double timeout, rdv_timeout, hb, hb_timeout;
    size_t chunk_bytes;
    unsigned char *secret;
    size_t secret_len;
    char leader_ep[200], listen_ep[200];

    void *zctx;
    void *pipe_main, *pipe_thr;     /* inproc PAIR: Lua thread <-> control thread */
    void *ctl;                      /* leader: ROUTER; member: DEALER (control thread) */
    void *zap;                      /* ZAP handler (control thread) */
    void *pull, *push;              /* the ring (calling thread) */
    pthread_t thr;
    int thr_running;
    void *ts;                       /* the control thread's state */

    cl_peer *peers;                 /* [size]; peers[rank] is this process */
    unsigned char session[16];
    char token[65];                 /* data-plane password, hex */
    int token_ready;

    pthread_mutex_t mu;             /* peers[].state/reason/since, broken */
    int broken;                     /* a collective failed: the ranks disagree now */
    int broken_status;
    char broken_msg[512];

    uint64_t coll_seq;              /* collectives issued */
    int inflight;                   /* zero-copy sends not yet released (atomic) */
    ld_cluster_stats stats;
};

double cl_now(void);
/* A peer in trouble: PEER_LOST (fail now) or PEER_DONE (fail after a grace),
   with its rank and a message; PEER_JOINED when every peer is fine. */
int cl_trouble(ld_cluster *c, int *rank, char *msg, size_t n);
/* Mark the cluster broken with the current error (ld_error()). */
int cl_break(ld_cluster *c, int status);
void cl_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
