/*
 * ld_cluster.h - several processes (on one machine or many) that train as
 * one: an authenticated control plane, heartbeats, and collectives over a
 * ring of ZeroMQ sockets. MultiWorkerMirroredStrategy and LocalCluster in
 * lua_bindings are built on this.
 *
 *     ld_cluster_opts o = {.rank = r, .size = n, .leader = "127.0.0.1:7000",
 *                          .listen = "127.0.0.1:7001", .secret = s, .secret_len = 64,
 *                          .timeout = 30, .data_plane = 1};
 *     ld_cluster *c = ld_cluster_join(&o);      // rendezvous; NULL + ld_error()
 *     ld_cluster_all_reduce(c, grads, n, 0);     // float32 sum across the n processes
 *     ld_cluster_free(c);                        // says goodbye
 *
 * Control plane. Rank 0 (the leader: TF's chief, or worker 0) listens on
 * `leader`; every other rank connects to it. A rank proves it knows the
 * shared secret without sending it: both sides pick a random nonce and answer
 * with HMAC-SHA256(secret, role | nonces | rank), so a peer without the
 * secret is refused and a rank never talks to a leader that does not know it
 * either. Every later message carries a sequence number and an HMAC under a
 * per-connection session key; anything malformed, unsigned, replayed or
 * unexpected is logged and dropped, never acted on. A thread per process
 * sends heartbeats and watches the peers': a rank silent for
 * `heartbeat_timeout` seconds is declared lost, the leader tells the others,
 * and every collective waiting on it fails with a message naming it.
 *
 * Data plane (ld_ring.c). Rank r receives on a PULL socket at `listen` and
 * sends to rank r+1's on a PUSH socket: a ring. Those sockets use ZeroMQ's
 * PLAIN mechanism with a password derived from the secret and the session,
 * checked by a ZAP handler in the control thread, so only members of this
 * session can feed the ring. all_reduce is a reduce-scatter then an
 * all-gather (2(n-1) steps), each segment cut into chunks that are forwarded
 * as soon as they are reduced (pipelined); sends are zero-copy.
 *
 * Every wait is bounded: no progress for `timeout` seconds, a lost peer or
 * Ctrl-C (ld_interrupt_flag) ends a collective with an error, and the
 * cluster is then broken (later collectives fail at once): the processes no
 * longer agree on where they are, so the program should stop.
 *
 * MPI path (ld_mpi.c). With opts.mpi the collectives are MPI_Allreduce,
 * MPI_Bcast and MPI_Barrier on MPI_COMM_WORLD instead of the ring; the
 * control plane (authentication, heartbeats, messages) stays. Under mpirun
 * the rendezvous itself can go through MPI: rank 0 broadcasts where it
 * listens and the session's secret (distribute/cluster.lua).
 *
 * GPU path. On GPUs the collectives are NCCL's, not the ring: rank 0 asks
 * the CUDA plugin for NCCL's unique id, the ring broadcasts it, and every
 * rank makes its communicator (ld_cluster_nccl_*, below). The ring stays
 * the CPU path and carries the rendezvous either way.
 */
#ifndef LD_CLUSTER_H
#define LD_CLUSTER_H

#include "ld_tensor.h"

typedef struct ld_cluster ld_cluster;

typedef struct {
    int rank, size;                 /* this process, and how many; rank 0 leads */
    const char *leader;             /* "host:port" of rank 0 (rank 0 binds it) */
    const char *listen;             /* this rank's data-plane address "host:port" (port 0: any);
                                       NULL: the leader's host, any port */
    const char *name;               /* how peers are named in messages: "worker" (default) */
    const void *secret;             /* the shared secret (required, at least 16 bytes) */
    size_t secret_len;
    double timeout;                 /* seconds without progress before a collective fails (default 30) */
    double rendezvous_timeout;      /* seconds to wait for every rank at join (default max(timeout, 60)) */
    double heartbeat;               /* seconds between heartbeats (default 0.25) */
    double heartbeat_timeout;       /* seconds of silence before a peer is lost (default min(timeout, 5)) */
    int data_plane;                 /* 1: form the ring for collectives; 0: control messages only */
    int quiet_loss;                 /* 1: a peer whose connection closed (it died) is not logged: a
                                       supervisor (ldist launch, a LocalCluster) that started the
                                       processes reports the death once; silence (a hang) still is */
    int mpi;                        /* 1: collectives through MPI (ld_mpi_init first; MPI's ranks
                                       are the cluster's), no ring; data_plane is then ignored */
    size_t chunk_bytes;             /* ring chunk size (default 1 MiB; LDIST_RING_CHUNK overrides) */
    /* polled while waiting at join (NULL: never): nonzero ends the wait at
       once with the message it wrote into why (LocalCluster: a worker it
       started died before joining, so nobody is coming) */
    int (*give_up)(void *ud, char *why, size_t n);
    void *give_up_ud;
} ld_cluster_opts;

/* Rendezvous: returns once every rank has joined and the ring (if asked)
   carries data, or NULL with ld_error() set. */
ld_cluster *ld_cluster_join(const ld_cluster_opts *o);
/* Leave: tells the peers this rank finished (not failed), lets queued ring
   data drain (up to 2 s), stops the thread. NULL is fine. */
void ld_cluster_free(ld_cluster *c);

int ld_cluster_rank(const ld_cluster *c);
int ld_cluster_size(const ld_cluster *c);
/* "worker 1 (pid 4242 on host, 127.0.0.1:40123)": how messages name rank r. */
const char *ld_cluster_peer_name(const ld_cluster *c, int r);
int ld_cluster_peer_pid(const ld_cluster *c, int r);
/* LD_OK, or the failure that broke the cluster (a peer lost, a timeout),
   with its message. */
int ld_cluster_check(ld_cluster *c);
/* Log lines (rejected connections and messages, lost peers) go to stderr
   prefixed "ldist cluster: "; a front end may redirect them. */
void ld_cluster_set_log(void (*fn)(void *ud, const char *line), void *ud);

/* ---- control messages (small: configuration, code, results) ----
   Rank 0 may send to any rank; other ranks send to rank 0. `type` is a short
   name (at most 31 bytes). ld_cluster_recv waits up to `timeout` seconds
   (< 0: the cluster timeout) and returns 1 with *data malloc'ed (free it),
   0 on timeout, or a negative status when the cluster failed. */
int ld_cluster_send(ld_cluster *c, int to, const char *type, const void *data, size_t n);
int ld_cluster_recv(ld_cluster *c, double timeout, int *from, char type[32], void **data, size_t *n);

/* ---- collectives (ld_ring.c): every rank calls them in the same order ---- */
/* Sum (mean: average) n floats across the ranks, in place. */
int ld_cluster_all_reduce(ld_cluster *c, float *buf, int64_t n, int mean);
/* The same over k contiguous float32 host tensors (packed once). */
int ld_cluster_all_reduce_tensors(ld_cluster *c, int k, ld_tensor *const *t, int mean);
/* Copy nbytes from rank `root` into buf on every rank. */
int ld_cluster_broadcast(ld_cluster *c, int root, void *buf, size_t nbytes);
int ld_cluster_barrier(ld_cluster *c);

typedef struct {
    int64_t calls, bytes;           /* collective calls, bytes reduced per rank (summed) */
    double seconds;                 /* time inside all_reduce, summed */
} ld_cluster_stats;
void ld_cluster_stats_get(ld_cluster *c, ld_cluster_stats *s, int reset);
/* The ring's links of this rank: "shm" (shared memory, the peer is on this
   host) or "tcp" (ZeroMQ), to the next rank and from the previous one;
   "mpi" for both when MPI carries the collectives. */
void ld_cluster_links(ld_cluster *c, const char **to_next, const char **from_prev);

/* ---- the GPU path (ld_cluster_nccl.c): NCCL across processes ----
   Through the CUDA plugin (engine/cuda/ld_cuda.h). Every rank calls init with
   its GPU; rank 0 makes NCCL's unique id and the ring broadcasts it, so the
   id travels only inside this authenticated session. LD_EDEVICE with a clear
   message when the plugin, a GPU or NCCL is missing. */
int ld_cluster_nccl_init(ld_cluster *c, ld_device *dev, void **comm);
int ld_cluster_nccl_all_reduce(void *comm, int k, ld_tensor *const *t, int mean);
void ld_cluster_nccl_free(void *comm);

/* ---- MPI (ld_mpi.c), opened at run time: libmpi.so.40 or libmpi.so (Open MPI),
   or LDIST_MPI_LIB. Every call but available fails with a message naming
   what is missing. */
int ld_mpi_available(void);                                 /* 1, or 0 with ld_error() saying why */
/* MPI_Init_thread once per process (finalised at exit); this rank and the
   size of MPI_COMM_WORLD */
int ld_mpi_init(int *rank, int *size);
int ld_mpi_all_reduce(float *buf, int64_t n, int mean);     /* sum (mean) in place over MPI_COMM_WORLD */
int ld_mpi_broadcast(int root, void *buf, size_t nbytes);
int ld_mpi_barrier(void);

/* ---- processes (ld_cluster_proc.c) ----
   A group of child processes whose stdout and stderr come back line by line,
   for `ldist launch` and LocalCluster. Children die with the thread that
   started them (PR_SET_PDEATHSIG), read /dev/null as stdin, and inherit no
   descriptor but their pipes. */
typedef struct ld_procs ld_procs;
typedef struct {
    int index;                      /* which child */
    int kind;                       /* LD_PROC_OUT, LD_PROC_ERR: a line; LD_PROC_EXIT */
    const char *line;               /* the line without its end (valid until the next poll) */
    size_t len;
    char end;                       /* how it ended: '\n', '\r', or 0 (end of output) */
    int status;                     /* LD_PROC_EXIT: exit code, or 128 + signal */
    int signal;                     /* LD_PROC_EXIT: the signal that killed it, 0 if none */
} ld_proc_event;
enum { LD_PROC_NONE = 0, LD_PROC_OUT, LD_PROC_ERR, LD_PROC_EXIT };
enum { LD_PROCS_NEW_GROUP = 1 };    /* flags: children in their own process group (no terminal Ctrl-C) */
/* Start n children: child i runs argv (argv[0] a path) with envs[i] ("NAME=value"
   strings, NULL-terminated; may be NULL) set over this process's environment. */
ld_procs *ld_procs_start(int n, char *const *argv, char *const *const *envs, int flags);
/* The next event within `timeout` seconds: 1, or 0 when none came. An exit
   comes after the last line of that child. */
int ld_procs_poll(ld_procs *p, double timeout, ld_proc_event *ev);
int ld_procs_count(const ld_procs *p);
int ld_procs_pid(const ld_procs *p, int i);
int ld_procs_alive(const ld_procs *p, int i);               /* not yet reaped */
int ld_procs_running(const ld_procs *p);                    /* children not yet reaped */
void ld_procs_signal(ld_procs *p, int sig);                 /* to every live child */
/* Stop every child (SIGTERM, then SIGKILL after `grace` seconds), reap, free. */
void ld_procs_free(ld_procs *p, double grace);
/* The path of the running executable (/proc/self/exe), for starting more of it. */
const char *ld_self_exe(void);
/* A port free now on host, for a listener another process binds later:
   below the kernel's ephemeral range, so no connect() takes it meanwhile
   (ld_cluster_launch.c); -1 with errno set. */
int ld_free_port(const char *host);

/* `ldist launch ...` (argv[0] is "launch"): returns the exit status. */
int ld_launch_main(int argc, char **argv);

/* Random bytes from the kernel (getrandom); LD_OK or LD_EIO. */
int ld_random_bytes(void *buf, size_t n);


/* ---- for ParameterServerStrategy (ld_cluster_ps.c) ----
   ld_cluster_recv_any: ld_cluster_recv that keeps waiting when a member is
   lost (only a lost leader ends it, at a member); the caller asks
   ld_cluster_peer_state: 0 not joined, 1 joined, 2 lost, 3 left; -1 no such rank. */
int ld_cluster_recv_any(ld_cluster *c, double timeout, int *from, char type[32], void **data, size_t *n);
int ld_cluster_peer_state(ld_cluster *c, int r);
/* ParameterServerStrategy: wait for a control message (1) or a readable fd (2), 0 on timeout */
int ld_cluster_wait_fd(ld_cluster *c, int fd, double timeout);

#endif
