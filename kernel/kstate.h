/*
 * kstate.h - what the kernel's files share (not a public API).
 *
 * Threads and who owns what:
 *   main     the Lua state, the shell and stdin sockets; runs every request
 *            that needs Lua.
 *   control  the control socket: kernel_info, interrupt, shutdown, answered
 *            while a cell runs.
 *   hb       the heartbeat socket: echoes.
 *   capture  reads the pipes that replace fd 1 and 2 and publishes `stream`
 *            messages (kcapture.c).
 * The iopub socket is shared; every send takes `iopub_lock` (a mutex is the
 * full memory barrier ZeroMQ asks for when a socket changes threads).
 * SIGINT is blocked in every thread but main, so the handler always runs on
 * the thread that runs Lua.
 */
#ifndef LDIST_KSTATE_H
#define LDIST_KSTATE_H

#include "kwire.h"

#include <lua.h>
#include <pthread.h>
#include <signal.h>

typedef struct {
    int session;        /* history session number */
    int line;           /* execution count */
    char *input;        /* owned */
    char *output;       /* owned text/plain of the result, or NULL */
} khist;

typedef struct kcapture kcapture;

typedef struct kernel {
    void *zctx;
    void *shell, *control, *iopub, *stdin_sock, *hb;
    void *wake_main, *wake_ctl;     /* inproc pair: control -> main ("shutdown") */
    ksigner signer;
    ksighist seen;                  /* signatures accepted so far (replays are refused) */
    pthread_mutex_t seen_lock;      /* main and control both decode */
    char session[37];               /* this kernel's session id (uuid) */
    const char *username;
    pthread_mutex_t iopub_lock;
    pthread_t main_thread, control_thread, hb_thread, guard_thread;
    /* limits on connections that have not sent a good signature (ld_guard.h):
       routers for shell, control and stdin, small for heartbeat and iopub */
    struct ld_guard *guard_routers, *guard_small;
    void *mon[5];                   /* the guard thread's monitor sockets */
    int log_fd;                     /* the real stderr, for the kernel's own log */
    kcapture *capture;

    lua_State *L;
    json_t *kernel_info;            /* reply content, built once */

    /* the request being served by main (NULL between requests) */
    const kmsg *cur;
    int allow_stdin;
    int silent;                     /* the current execute is silent */
    json_t *payload;                /* execute_reply payload (pager), or NULL */
    int execution_count;
    int hist_session;
    khist *hist;
    size_t nhist, caphist;
    char *inbuf;                    /* unread text given by the front end (io.read) */
    size_t inlen;

    volatile sig_atomic_t executing;    /* main is running user code */
    volatile sig_atomic_t interrupted;  /* an interrupt arrived during this run */
    volatile sig_atomic_t shutdown;     /* leave as soon as possible */
    int restart;
    int abort_queue;                /* an error asked to abort queued cells */
} kernel;

/* ---- kmain.c ------------------------------------------------------------ */
/* Log a line to the kernel's real stderr (never to the notebook). */
void klog(kernel *K, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Publish on iopub with `parent` as parent header; takes ownership of content. */
void kpublish(kernel *K, const char *msg_type, json_t *parent, json_t *content);
/* The same with a metadata object (owned; NULL means {}). */
void kpublish_md(kernel *K, const char *msg_type, json_t *parent, json_t *metadata, json_t *content);
/* Send on `sock` to the identities of `req`; takes ownership of content. */
void kreply(kernel *K, void *sock, const kmsg *req, const char *msg_type, json_t *content);
/* Receive one message from the stdin socket within timeout_ms (-1: forever).
   Returns 1 and fills m, 0 on timeout or EINTR, -1 on a fatal error. */
int krecv_stdin(kernel *K, kmsg *m, int timeout_ms);
/* After an error with stop_on_error: answer queued execute requests "aborted". */
void kabort_queued(kernel *K);
/* Make running Lua code stop (async-signal-safe when called on main). */
void kinterrupt(kernel *K);

/* ---- kcapture.c --------------------------------------------------------- */
/* Redirect fd 1 and 2 into pipes read by a thread that publishes `stream`
   messages for the current parent. Returns 0 or -1 (then nothing changed). */
int kcapture_start(kernel *K);
/* Publish everything written so far (main thread, before results and idle). */
void kcapture_flush(kernel *K);
/* Set the parent header for output from now on (borrowed until the next call)
   and whether output is dropped (`silent`). Flushes first. */
void kcapture_set_parent(kernel *K, json_t *parent, int silent);
/* Flush, stop the thread and give fd 1 and 2 back. */
void kcapture_stop(kernel *K);

/* ---- kexec.c ------------------------------------------------------------ */
void kexec_execute(kernel *K, const kmsg *m);
void kexec_history(kernel *K, const kmsg *m);
void kexec_free(kernel *K);

/* ---- kintro.c ----------------------------------------------------------- */
void kintro_complete(kernel *K, const kmsg *m);
void kintro_inspect(kernel *K, const kmsg *m);
void kintro_is_complete(kernel *K, const kmsg *m);

/* ---- kio.c -------------------------------------------------------------- */
/* Install the kernel's Lua side: io.read/io.stdin/io.lines over the stdin
   channel, help() as a pager, display and comm backends. */
void kio_install(kernel *K);
void kio_comm(kernel *K, const kmsg *m);         /* comm_open / comm_msg / comm_close */
void kio_comm_info(kernel *K, const kmsg *m);
/* Push the ldist module table (global `ldist` or package.loaded.ldist, else
   nil); returns its Lua type. */
int kio_push_ldist(lua_State *L);
/* Lua value <-> JSON (tables with keys 1..n become arrays). */
json_t *kio_tojson(lua_State *L, int idx, int depth);
void kio_pushjson(lua_State *L, json_t *j);
/* The mime bundle of the value at idx: {"text/plain": repr, ...__mimebundle}.
   Returns new data and (in *metadata) metadata objects. Never raises. */
json_t *kio_mimebundle(kernel *K, int idx, json_t **metadata);

#endif
