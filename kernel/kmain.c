/*
 * kmain.c - `ldist kernel`: the kernelspec installer, sockets, threads, the
 * shell loop and the control channel. See kstate.h for who owns what.
 */
#include "kernel.h"
#include "kstate.h"
#include "ldist.h"
#include "ld_core.h"   /* LD_VERSION */
#include "ld_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define KERNEL_NAME "ldist"
#define DISPLAY_NAME "ldist (Lua 5.4)"

/* bytes: the largest frame the shell, control and stdin sockets take. A
   frame is held whole before its signature can be checked, so this bounds
   what a stranger can pin per connection. 64 MiB is 6 times the 10 MiB a
   notebook server's websocket passes by default (tornado's
   websocket_max_message_size), so no message from a front end comes near it;
   a larger payload belongs in a file the kernel reads. */
#define KERNEL_MAX_FRAME ((int64_t)64 << 20)
/* bytes: what ZeroMQ itself takes per frame on those sockets. A signed
   request between KERNEL_MAX_FRAME and this gets an error reply (ZeroMQ
   drops a larger one without a word: the connection is closed). Strangers
   cannot use the room: connections that have not sent a good signature may
   hold KERNEL_UNAUTH_BYTES in all (ld_guard.h), at most
   KERNEL_UNAUTH_CONNS of them. A client's control and stdin connections
   stay untrusted until it sends there (often never), so the count leaves
   room for many clients; a client connection shed anyway is reconnected by
   ZeroMQ. */
#define KERNEL_MAX_ZMQ_FRAME ((int64_t)256 << 20)
#define KERNEL_UNAUTH_BYTES ((int64_t)64 << 20)
#define KERNEL_UNAUTH_CONNS 64
/* heartbeat pings and iopub subscriptions are a few bytes; such connections
   never authenticate, so each may hold this much, and at most
   KERNEL_SMALL_CONNS of them are kept (new ones beyond are closed) */
#define KERNEL_SMALL_FRAME ((int64_t)64 << 10)
#define KERNEL_SMALL_CONNS 256
/* A reply waits for room while its client does not read: ROUTER sockets drop
   silently at their high-water mark, so they are made to say so
   (ZMQ_ROUTER_MANDATORY) and each send waits up to this long by the clock,
   in sends that block for KERNEL_SEND_SLICE_MS (ZMQ_SNDTIMEO) each, then is
   given up and logged. */
#define KERNEL_SEND_WAIT_S 60
#define KERNEL_SEND_SLICE_MS 1000

static kernel *g_kernel;   /* for the SIGINT handler */

/* ---- logging and sending ------------------------------------------------ */

void klog(kernel *K, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    int fd = K && K->log_fd >= 0 ? K->log_fd : 2;
    ssize_t w = write(fd, "[ldist kernel] ", 15);
    w = write(fd, line, (size_t)n);
    (void)w;
}

/* klog for messages dropped on arrival, which anyone who reaches a port can
   cause: at most KLOG_DROP_RATE lines a second; the rest are counted and the
   count is logged with the next line that goes out. */
#define KLOG_DROP_RATE 20
static void klog_dropped(kernel *K, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void klog_dropped(kernel *K, const char *fmt, ...) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static time_t window;
    static int lines;
    static long unlogged;
    long summed = 0;
    int ok;
    pthread_mutex_lock(&mu);
    time_t now = time(NULL);
    if (now != window) { window = now; lines = 0; }
    ok = lines < KLOG_DROP_RATE;
    if (ok) { lines++; summed = unlogged; unlogged = 0; }
    else unlogged++;
    pthread_mutex_unlock(&mu);
    if (!ok) return;
    if (summed) klog(K, "(%ld more dropped messages were not logged: at most %d lines a second)", summed, KLOG_DROP_RATE);
    char line[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    klog(K, "%s", line);
}

/* Send a message; ids are routing frames (for iopub, the topic). Takes
   ownership of content and metadata. Returns 0 or -1. */
static int ksend(kernel *K, void *sock, const kbuf *ids, size_t nids, const char *msg_type,
                 json_t *parent, json_t *metadata, json_t *content) {
    json_t *header = kwire_header(msg_type, K->session, K->username);
    char *parts[4], hex[2 * 64 + 1];
    size_t lens[4];
    int rc = -1;
    if (!content) content = json_object();
    if (!metadata) metadata = json_object();
    if (header && content && metadata &&
        kwire_encode(&K->signer, header, parent, metadata, content, parts, lens, hex) == 0) {
        rc = 0;
        for (size_t i = 0; i < nids && rc == 0; i++) {
            /* the first frame decides whether the message goes (a ROUTER
               takes the rest of a message it has accepted the start of);
               the wait is timed on the clock: a send cut short by a signal
               (EINTR) is not a whole slice */
            int e = 0;
            double deadline = ld_now() + KERNEL_SEND_WAIT_S;
            while ((rc = zmq_send(sock, ids[i].data, ids[i].len, ZMQ_SNDMORE) < 0 ? -1 : 0) && i == 0 &&
                   ((e = zmq_errno()) == EAGAIN || e == EINTR) && !K->shutdown && ld_now() < deadline)
                ;
            if (rc && i == 0) {
                e = zmq_errno();
                if (e == EAGAIN)
                    klog(K, "could not deliver %s: its client has not read its socket for %d s", msg_type,
                         KERNEL_SEND_WAIT_S);
                else
                    klog(K, "could not deliver %s: %s", msg_type,
                         e == EHOSTUNREACH ? "its client is gone" : zmq_strerror(e));
                rc = -2;
            }
        }
        if (rc == 0) rc = zmq_send(sock, KWIRE_DELIM, sizeof KWIRE_DELIM - 1, ZMQ_SNDMORE) < 0 ? -1 : 0;
        if (rc == 0) rc = zmq_send(sock, hex, strlen(hex), ZMQ_SNDMORE) < 0 ? -1 : 0;
        for (int i = 0; i < 4 && rc == 0; i++)
            rc = zmq_send(sock, parts[i], lens[i], i < 3 ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
        for (int i = 0; i < 4; i++) free(parts[i]);
        if (rc == -1) klog(K, "could not send %s: %s", msg_type, zmq_strerror(zmq_errno()));
        if (rc) rc = -1;
    }
    json_decref(header);
    json_decref(metadata);
    json_decref(content);
    return rc;
}

void kpublish_md(kernel *K, const char *msg_type, json_t *parent, json_t *metadata,
                 json_t *content) {
    char topic[128];
    snprintf(topic, sizeof topic, "kernel.%s.%s", K->session, msg_type);
    kbuf id = {topic, strlen(topic)};
    pthread_mutex_lock(&K->iopub_lock);
    if (K->iopub) ksend(K, K->iopub, &id, 1, msg_type, parent, metadata, content);
    else {
        json_decref(metadata);
        json_decref(content);
    }
    pthread_mutex_unlock(&K->iopub_lock);
}

void kpublish(kernel *K, const char *msg_type, json_t *parent, json_t *content) {
    kpublish_md(K, msg_type, parent, NULL, content);
}

void kreply(kernel *K, void *sock, const kmsg *req, const char *msg_type, json_t *content) {
    ksend(K, sock, req->ids, req->nids, msg_type, req->header, NULL, content);
}

static void publish_status(kernel *K, json_t *parent, const char *state) {
    kpublish(K, "status", parent, json_pack("{s:s}", "execution_state", state));
}

/* ---- receiving ---------------------------------------------------------- */

typedef struct {
    zmq_msg_t *msgs;
    size_t n, cap;
} zframes;

static void zframes_clear(zframes *z) {
    for (size_t i = 0; i < z->n; i++) zmq_msg_close(&z->msgs[i]);
    z->n = 0;
}

/* Receive all frames of one message. Returns 0, or -1 with errno (EAGAIN
   when flags has ZMQ_DONTWAIT and nothing is there, EINTR, ETERM). */
static int recv_frames(void *sock, zframes *z, int flags) {
    zframes_clear(z);
    for (;;) {
        if (z->n == z->cap) {
            size_t cap = z->cap ? 2 * z->cap : 8;
            zmq_msg_t *p = realloc(z->msgs, cap * sizeof *p);
            if (!p) {
                zframes_clear(z);
                errno = ENOMEM;
                return -1;
            }
            z->msgs = p;
            z->cap = cap;
        }
        zmq_msg_t *msg = &z->msgs[z->n];
        zmq_msg_init(msg);
        int rc;
        /* The rest of a multipart message is already here: wait for it. */
        while ((rc = zmq_msg_recv(msg, sock, z->n ? 0 : flags)) < 0 && errno == EINTR && z->n)
            ;
        if (rc < 0) {
            int e = errno;
            zmq_msg_close(msg);
            zframes_clear(z);
            errno = e;
            return -1;
        }
        z->n++;
        if (!zmq_msg_more(msg)) return 0;
    }
}

static void publish_status(kernel *K, json_t *parent, const char *state);

/* A signed request over KERNEL_MAX_FRAME: an error reply where the protocol
   has one (a *_request on shell or control), so the client does not wait
   for ever; the request is not run. */
static void refuse_too_large(kernel *K, const kmsg *m, const char *channel, size_t total) {
    char evalue[200];
    snprintf(evalue, sizeof evalue, "a %s of %zu bytes is over the kernel's limit of %lld MiB per message (put large "
             "data in a file and read it from the cell)", m->msg_type, total, (long long)(KERNEL_MAX_FRAME >> 20));
    klog(K, "refused a message on %s: %s", channel, evalue);
    void *sock = !strcmp(channel, "shell") ? K->shell : !strcmp(channel, "control") ? K->control : NULL;
    size_t tl = strlen(m->msg_type);
    if (!sock || tl < 8 || strcmp(m->msg_type + tl - 8, "_request")) return;
    char reply[128];
    snprintf(reply, sizeof reply, "%.*s_reply", (int)(tl - 8), m->msg_type);
    json_t *content = json_pack("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", "MessageTooLarge", "evalue", evalue,
                                "traceback");
    if (!strcmp(m->msg_type, "execute_request")) json_object_set_new(content, "execution_count", json_integer(K->execution_count));
    publish_status(K, m->header, "busy");
    kreply(K, sock, m, reply, content);
    publish_status(K, m->header, "idle");
}

/* Decode what recv_frames got; logs and returns -1 for a message that must be
   dropped (bad signature, malformed, too large). */
static int decode_frames(kernel *K, zframes *z, kmsg *m, const char *channel) {
    kframe stack[16] = {{0}}, *fr = z->n <= 16 ? stack : malloc(z->n * sizeof *fr);
    if (!fr) return -1;
    size_t total = 0;
    for (size_t i = 0; i < z->n; i++) {
        fr[i].data = zmq_msg_data(&z->msgs[i]);
        fr[i].len = zmq_msg_size(&z->msgs[i]);
        total += fr[i].len;
    }
    /* the connection it came from (the routing-id frame ROUTER adds has none) */
    int fd = z->n ? zmq_msg_get(&z->msgs[z->n - 1], ZMQ_SRCFD) : -1;
    char err[160];
    kwire_status st = kmsg_decode(&K->signer, fr, z->n, m, err, sizeof err);
    if (fr != stack) free(fr);
    zframes_clear(z);
    if (st != KWIRE_OK) {
        klog_dropped(K, "dropped a message on %s: %s%s", channel, err,
             st == KWIRE_ESIG ? " (not executed)" : "");
        return -1;
    }
    if (m->is_signed) {
        pthread_mutex_lock(&K->seen_lock);
        int seen = ksighist_check(&K->seen, m->digest);
        pthread_mutex_unlock(&K->seen_lock);
        if (seen) {
            klog_dropped(K, "dropped a %s on %s: %s (not executed)", m->msg_type, channel,
                 seen > 0 ? "a replay, its signature was seen before" : "out of memory");
            kmsg_free(m);
            return -1;
        }
    }
    ld_guard_trust(K->guard_routers, fd);       /* a good signature: this connection is a client's */
    if (total > (size_t)KERNEL_MAX_FRAME) {
        refuse_too_large(K, m, channel, total);
        kmsg_free(m);
        return -1;
    }
    return 0;
}

int krecv_stdin(kernel *K, kmsg *m, int timeout_ms) {
    zmq_pollitem_t it = {K->stdin_sock, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&it, 1, timeout_ms);
    if (rc < 0) return errno == EINTR ? 0 : -1;
    if (rc == 0) return 0;
    zframes z = {0};
    int got = 0;
    if (recv_frames(K->stdin_sock, &z, ZMQ_DONTWAIT) == 0 && decode_frames(K, &z, m, "stdin") == 0)
        got = 1;
    zframes_clear(&z);
    free(z.msgs);
    return got;
}

/* ---- interrupts --------------------------------------------------------- */

static void on_sigint(int sig) {
    (void)sig;
    kernel *K = g_kernel;
    if (K && K->executing) {
        K->interrupted = 1;
        ldist_interrupt(K->L);
    }
}

void kinterrupt(kernel *K) {
    /* Run the handler on the main thread, whatever thread asks: then only one
       thread ever touches the Lua hook, and a blocking zmq_poll there wakes
       with EINTR. */
    if (pthread_equal(pthread_self(), K->main_thread))
        on_sigint(SIGINT);
    else
        pthread_kill(K->main_thread, SIGINT);
}

/* ---- kernel_info -------------------------------------------------------- */

static json_t *build_kernel_info(void) {
    char banner[256];
    snprintf(banner, sizeof banner,
             "ldist %s on %s - distributed training from Lua\n"
             "help(x) or ?x shows documentation; Tab completes.",
             LD_VERSION, LUA_RELEASE);
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}, s:s, s:b, s:[{s:s, s:s}, {s:s, s:s}]}",
        "status", "ok", "protocol_version", KWIRE_PROTOCOL_VERSION, "implementation", "ldist",
        "implementation_version", LD_VERSION, "language_info", "name", "lua", "version",
        LUA_VERSION_MAJOR "." LUA_VERSION_MINOR "." LUA_VERSION_RELEASE, "mimetype", "text/x-lua",
        "file_extension", ".lua", "pygments_lexer", "lua", "codemirror_mode", "lua", "banner",
        banner, "debugger", 0, "help_links", "text", "Lua 5.4 Reference Manual", "url",
        "https://www.lua.org/manual/5.4/", "text", "Programming in Lua", "url",
        "https://www.lua.org/pil/");
}

/* ---- shell -------------------------------------------------------------- */

static void handle_shutdown(kernel *K, void *sock, const kmsg *m) {
    int restart = json_is_true(json_object_get(m->content, "restart"));
    kreply(K, sock, m, "shutdown_reply", json_pack("{s:s, s:b}", "status", "ok", "restart", restart));
    K->restart = restart;
    K->shutdown = 1;
}

static void handle_shell(kernel *K, const kmsg *m) {
    const char *t = m->msg_type;
    publish_status(K, m->header, "busy");
    K->cur = m;
    if (!strcmp(t, "execute_request")) kexec_execute(K, m);
    else if (!strcmp(t, "kernel_info_request"))
        kreply(K, K->shell, m, "kernel_info_reply", json_incref(K->kernel_info));
    else if (!strcmp(t, "complete_request")) kintro_complete(K, m);
    else if (!strcmp(t, "inspect_request")) kintro_inspect(K, m);
    else if (!strcmp(t, "is_complete_request")) kintro_is_complete(K, m);
    else if (!strcmp(t, "history_request")) kexec_history(K, m);
    else if (!strcmp(t, "comm_info_request")) kio_comm_info(K, m);
    else if (!strcmp(t, "comm_open") || !strcmp(t, "comm_msg") || !strcmp(t, "comm_close"))
        kio_comm(K, m);
    else if (!strcmp(t, "shutdown_request")) handle_shutdown(K, K->shell, m);
    else if (!strcmp(t, "interrupt_request"))   /* belongs on control; harmless here */
        kreply(K, K->shell, m, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
    else if (!strcmp(t, "connect_request")) {
        char ep[256];
        json_t *c = json_pack("{s:s}", "status", "ok");
        void *socks[5] = {K->shell, K->iopub, K->stdin_sock, K->hb, K->control};
        const char *names[5] = {"shell_port", "iopub_port", "stdin_port", "hb_port", "control_port"};
        for (int i = 0; i < 5; i++) {
            size_t sz = sizeof ep;
            if (zmq_getsockopt(socks[i], ZMQ_LAST_ENDPOINT, ep, &sz) == 0) {
                const char *colon = strrchr(ep, ':');
                json_object_set_new(c, names[i], json_integer(colon ? atoi(colon + 1) : 0));
            }
        }
        kreply(K, K->shell, m, "connect_reply", c);
    } else
        klog(K, "ignored a message of unknown type '%s' on shell", t);
    K->cur = NULL;
    kcapture_flush(K);
    /* Abort before idle (as ipykernel does): a client that sends its next
       cell when it sees idle must not have it swept up with the queue. */
    if (K->abort_queue) {
        K->abort_queue = 0;
        kabort_queued(K);
    }
    publish_status(K, m->header, "idle");
}

/* After an error with stop_on_error: every execute_request already queued is
   answered "aborted" without running; other requests are served in order. */
void kabort_queued(kernel *K) {
    zframes z = {0};
    for (;;) {
        if (recv_frames(K->shell, &z, ZMQ_DONTWAIT) < 0) break;
        kmsg m;
        if (decode_frames(K, &z, &m, "shell") < 0) continue;
        if (!strcmp(m.msg_type, "execute_request")) {
            publish_status(K, m.header, "busy");
            kreply(K, K->shell, &m, "execute_reply",
                   json_pack("{s:s, s:i, s:[], s:{}}", "status", "aborted", "execution_count",
                             K->execution_count, "payload", "user_expressions"));
            publish_status(K, m.header, "idle");
        } else {
            handle_shell(K, &m);
        }
        kmsg_free(&m);
    }
    zframes_clear(&z);
    free(z.msgs);
}

/* ---- control and heartbeat threads -------------------------------------- */

static void *watchdog_main(void *arg) {
    /* Shutdown was asked: if a C loop ignores the interrupt, leave anyway. */
    kernel *K = arg;
    sleep(3);
    klog(K, "shutdown: the running code did not stop, exiting now");
    _exit(0);
    return NULL;
}

/* A kernel whose front end died (a crashed editor, a killed notebook server)
   would hold its memory and devices forever: when the parent that started
   us goes away, leave as a shutdown_request would (ipykernel does the same). */
static void *parent_watch_main(void *arg) {
    kernel *K = arg;
    pid_t parent = getppid();
    if (parent <= 1) return NULL;               /* started by init: nothing to watch */
    while (!K->shutdown) {
        sleep(1);
        if (getppid() != parent) {
            klog(K, "the parent process %d is gone: shutting down", (int)parent);
            K->shutdown = 1;
            pthread_t w;
            if (pthread_create(&w, NULL, watchdog_main, K) == 0) pthread_detach(w);
            /* stops a running cell, and main's poll returns EINTR and sees
               the flag (wake_ctl belongs to the control thread) */
            kinterrupt(K);
            return NULL;
        }
    }
    return NULL;
}

static void *control_main(void *arg) {
    kernel *K = arg;
    zframes z = {0};
    for (;;) {
        if (recv_frames(K->control, &z, 0) < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            break;                                  /* ETERM: the context is closing */
        }
        kmsg m;
        if (decode_frames(K, &z, &m, "control") < 0) continue;
        const char *t = m.msg_type;
        publish_status(K, m.header, "busy");
        if (!strcmp(t, "kernel_info_request"))
            kreply(K, K->control, &m, "kernel_info_reply", json_incref(K->kernel_info));
        else if (!strcmp(t, "interrupt_request")) {
            kinterrupt(K);
            kreply(K, K->control, &m, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
        } else if (!strcmp(t, "shutdown_request")) {
            handle_shutdown(K, K->control, &m);
            publish_status(K, m.header, "idle");
            kinterrupt(K);                          /* stop a running cell */
            zmq_send(K->wake_ctl, "x", 1, ZMQ_DONTWAIT);
            pthread_t w;
            if (pthread_create(&w, NULL, watchdog_main, K) == 0) pthread_detach(w);
        } else
            klog(K, "ignored a message of type '%s' on control", t);
        if (strcmp(t, "shutdown_request")) publish_status(K, m.header, "idle");
        kmsg_free(&m);
    }
    zframes_clear(&z);
    free(z.msgs);
    zmq_close(K->control);
    zmq_close(K->wake_ctl);
    return NULL;
}

static void *hb_main(void *arg) {
    kernel *K = arg;
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, K->hb, 0) < 0) {
            zmq_msg_close(&msg);
            if (errno == EINTR) continue;
            break;
        }
        int more = zmq_msg_more(&msg);
        zmq_msg_send(&msg, K->hb, more ? ZMQ_SNDMORE : 0);
    }
    zmq_close(K->hb);
    return NULL;
}

/* ---- the guard: limits on connections that have not authenticated ------- */

static void guard_log(void *ud, const char *line) { klog_dropped((kernel *)ud, "%s", line); }

/* Watch every socket's connections (monitors made before the threads start) */
static int guard_open(kernel *K) {
    void *socks[5] = {K->shell, K->control, K->stdin_sock, K->iopub, K->hb};
    K->guard_routers = ld_guard_new("shell, control and stdin", KERNEL_UNAUTH_CONNS, KERNEL_UNAUTH_BYTES, 0, guard_log, K);
    K->guard_small = ld_guard_new("heartbeat and iopub", KERNEL_SMALL_CONNS, -1, 1, guard_log, K);
    if (!K->guard_routers || !K->guard_small) return -1;
    for (int i = 0; i < 5; i++) {
        char ep[80];
        snprintf(ep, sizeof ep, "inproc://ldist-kmon-%d-%p", i, (void *)K);
        if (zmq_socket_monitor(socks[i], ep, LD_GUARD_EVENTS) != 0) return -1;
        K->mon[i] = zmq_socket(K->zctx, ZMQ_PAIR);
        if (!K->mon[i] || zmq_connect(K->mon[i], ep) != 0) return -1;
    }
    return 0;
}

static void *guard_main(void *arg) {
    kernel *K = arg;
    for (;;) {
        zmq_pollitem_t it[5];
        for (int i = 0; i < 5; i++) it[i] = (zmq_pollitem_t){K->mon[i], 0, ZMQ_POLLIN, 0};
        /* 20 ms: what a stranger can send between two checks stays small */
        int rc = zmq_poll(it, 5, 20);
        if (rc < 0 && errno == ETERM) break;
        for (int i = 0; rc > 0 && i < 5; i++) {
            if (!(it[i].revents & ZMQ_POLLIN)) continue;
            for (;;) {
                zmq_msg_t ev;
                zmq_msg_init(&ev);
                if (zmq_msg_recv(&ev, K->mon[i], ZMQ_DONTWAIT) < 0) { zmq_msg_close(&ev); break; }
                int more = zmq_msg_more(&ev);
                ld_guard_event(i < 3 ? K->guard_routers : K->guard_small, zmq_msg_data(&ev), zmq_msg_size(&ev));
                zmq_msg_close(&ev);
                while (more) {              /* the endpoint frame */
                    zmq_msg_init(&ev);
                    if (zmq_msg_recv(&ev, K->mon[i], 0) < 0) more = 0;
                    else more = zmq_msg_more(&ev);
                    zmq_msg_close(&ev);
                }
            }
        }
        ld_guard_enforce(K->guard_routers);
        ld_guard_enforce(K->guard_small);
    }
    for (int i = 0; i < 5; i++) zmq_close(K->mon[i]);
    return NULL;
}

/* ---- connection file and sockets ---------------------------------------- */

static void *bind_socket(kernel *K, json_t *cf, int type, const char *port_key) {
    const char *transport = json_string_value(json_object_get(cf, "transport"));
    const char *ip = json_string_value(json_object_get(cf, "ip"));
    json_t *pj = json_object_get(cf, port_key);
    if (!transport) transport = "tcp";
    if (!ip) ip = "127.0.0.1";
    long long port = json_is_integer(pj) ? json_integer_value(pj)
                     : json_is_string(pj) ? atoll(json_string_value(pj)) : 0;
    char ep[512];
    if (!strcmp(transport, "ipc"))
        snprintf(ep, sizeof ep, "ipc://%s-%lld", ip, port);
    else if (port > 0)
        snprintf(ep, sizeof ep, "%s://%s:%lld", transport, ip, port);
    else
        snprintf(ep, sizeof ep, "%s://%s:*", transport, ip);
    void *s = zmq_socket(K->zctx, type);
    int linger = 1000;
    if (s) zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (s && type != ZMQ_ROUTER) {
        int64_t maxsz = KERNEL_SMALL_FRAME;
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
    }
    if (s && type == ZMQ_ROUTER) {
        int64_t maxsz = KERNEL_MAX_ZMQ_FRAME;
        int one = 1, slice = KERNEL_SEND_SLICE_MS;
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &slice, sizeof slice);
    }
    if (!s || zmq_bind(s, ep) != 0) {
        klog(K, "cannot bind %s (%s): %s", port_key, ep, zmq_strerror(zmq_errno()));
        if (s) zmq_close(s);
        return NULL;
    }
    return s;
}

static int open_sockets(kernel *K, json_t *cf) {
    K->shell = bind_socket(K, cf, ZMQ_ROUTER, "shell_port");
    K->control = bind_socket(K, cf, ZMQ_ROUTER, "control_port");
    K->stdin_sock = bind_socket(K, cf, ZMQ_ROUTER, "stdin_port");
    K->iopub = bind_socket(K, cf, ZMQ_PUB, "iopub_port");
    K->hb = bind_socket(K, cf, ZMQ_REP, "hb_port");
    if (!K->shell || !K->control || !K->stdin_sock || !K->iopub || !K->hb) return -1;
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://ldist-wake-%p", (void *)K);
    K->wake_main = zmq_socket(K->zctx, ZMQ_PAIR);
    K->wake_ctl = zmq_socket(K->zctx, ZMQ_PAIR);
    if (!K->wake_main || !K->wake_ctl || zmq_bind(K->wake_main, ep) || zmq_connect(K->wake_ctl, ep))
        return -1;
    return 0;
}

/* ---- kernelspec install ------------------------------------------------- */

static int mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int install(int argc, char **argv, int i) {
    const char *prefix = NULL, *name = KERNEL_NAME, *display = DISPLAY_NAME, *mode = "signal";
    int user = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--user")) user = 1;
        else if (!strcmp(a, "--prefix") && i + 1 < argc) prefix = argv[++i];
        else if (!strcmp(a, "--sys-prefix")) prefix = "/usr/local";
        else if (!strcmp(a, "--name") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(a, "--display-name") && i + 1 < argc) display = argv[++i];
        else if (!strcmp(a, "--interrupt-mode") && i + 1 < argc) mode = argv[++i];
        else {
            fprintf(stderr, "ldist kernel install: unknown option '%s'\n"
                    "usage: ldist kernel install [--user | --prefix P] [--name N] "
                    "[--display-name D] [--interrupt-mode signal|message]\n", a);
            return 2;
        }
    }
    if (strcmp(mode, "signal") && strcmp(mode, "message")) {
        fprintf(stderr, "ldist kernel install: --interrupt-mode is 'signal' or 'message'\n");
        return 2;
    }
    char exe[4096], dir[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "ldist kernel install: cannot find the ldist executable\n");
        return 1;
    }
    exe[n] = 0;
    if (prefix)
        snprintf(dir, sizeof dir, "%s/share/jupyter/kernels/%s", prefix, name);
    else if (user) {
        const char *jd = getenv("JUPYTER_DATA_DIR"), *xdg = getenv("XDG_DATA_HOME");
        const char *home = getenv("HOME");
        if (jd && *jd) snprintf(dir, sizeof dir, "%s/kernels/%s", jd, name);
        else if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/jupyter/kernels/%s", xdg, name);
        else snprintf(dir, sizeof dir, "%s/.local/share/jupyter/kernels/%s", home ? home : ".", name);
    } else
        snprintf(dir, sizeof dir, "/usr/local/share/jupyter/kernels/%s", name);
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "ldist kernel install: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    json_t *spec = json_pack("{s:[s, s, s, s], s:s, s:s, s:s, s:{s:b}}", "argv", exe, "kernel",
                             "-f", "{connection_file}", "display_name", display, "language", "lua",
                             "interrupt_mode", mode, "metadata", "debugger", 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/kernel.json", dir);
    int rc = json_dump_file(spec, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(spec);
    if (rc != 0) {
        fprintf(stderr, "ldist kernel install: cannot write %s\n", path);
        return 1;
    }
    printf("Installed kernelspec %s in %s\n", name, dir);
    return 0;
}

/* ---- the kernel --------------------------------------------------------- */

static int run(const char *connection_file) {
    static kernel k;
    kernel *K = &k;
    memset(K, 0, sizeof *K);
    K->log_fd = dup(2);
    K->username = getenv("USER") ? getenv("USER") : "ldist";
    K->main_thread = pthread_self();
    K->hist_session = 1;
    pthread_mutex_init(&K->iopub_lock, NULL);
    pthread_mutex_init(&K->seen_lock, NULL);
    kwire_uuid(K->session);

    json_error_t je;
    json_t *cf = json_load_file(connection_file, 0, &je);
    if (!cf || !json_is_object(cf)) {
        klog(K, "cannot read the connection file %s: %s", connection_file, je.text);
        return 1;
    }
    const char *key = json_string_value(json_object_get(cf, "key"));
    const char *scheme = json_string_value(json_object_get(cf, "signature_scheme"));
    if (ksigner_init(&K->signer, scheme, key, key ? strlen(key) : 0) != 0) {
        klog(K, "unsupported signature scheme '%s'", scheme ? scheme : "");
        json_decref(cf);
        return 1;
    }

    /* Threads created from here on (ZeroMQ's I/O threads too) inherit a mask
       without SIGINT; main unblocks it once they exist. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);

    K->zctx = zmq_ctx_new();
    if (!K->zctx || open_sockets(K, cf) != 0) {
        json_decref(cf);
        return 1;
    }
    json_decref(cf);

    /* fd 0: C code reading stdin gets end-of-file rather than hanging on a
       pipe nobody writes; Lua's io.read goes through the stdin channel. */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    if (kcapture_start(K) != 0) klog(K, "output capture is off: C-level writes go to the log");

    K->L = ldist_newstate();
    if (!K->L) {
        klog(K, "cannot create the Lua state");
        return 1;
    }
    kio_install(K);
    K->kernel_info = build_kernel_info();

    if (guard_open(K) != 0) {
        klog(K, "cannot watch the sockets' connections: %s", zmq_strerror(zmq_errno()));
        return 1;
    }
    if (pthread_create(&K->guard_thread, NULL, guard_main, K) != 0 ||
        pthread_create(&K->hb_thread, NULL, hb_main, K) != 0 ||
        pthread_create(&K->control_thread, NULL, control_main, K) != 0) {
        klog(K, "cannot start threads");
        return 1;
    }
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, parent_watch_main, K) == 0) pthread_detach(watcher);
    json_t *none = json_object();
    publish_status(K, none, "starting");
    json_decref(none);

    g_kernel = K;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* A client that vanishes must not kill us with SIGPIPE on a captured pipe. */
    signal(SIGPIPE, SIG_IGN);

    zframes z = {0};
    while (!K->shutdown) {
        zmq_pollitem_t items[2] = {{K->shell, 0, ZMQ_POLLIN, 0}, {K->wake_main, 0, ZMQ_POLLIN, 0}};
        int rc = zmq_poll(items, 2, -1);
        if (rc < 0) {
            if (errno == EINTR) continue;
            klog(K, "poll failed: %s", zmq_strerror(errno));
            break;
        }
        if (items[1].revents & ZMQ_POLLIN) break;
        if (!(items[0].revents & ZMQ_POLLIN)) continue;
        if (recv_frames(K->shell, &z, ZMQ_DONTWAIT) < 0) continue;
        kmsg m;
        if (decode_frames(K, &z, &m, "shell") < 0) continue;
        handle_shell(K, &m);
        kmsg_free(&m);
    }
    zframes_clear(&z);
    free(z.msgs);

    /* Leave: stop capturing first (its thread publishes on iopub), then close
       Lua so files are flushed, then the sockets; ETERM ends the threads. */
    g_kernel = NULL;
    signal(SIGINT, SIG_IGN);
    kcapture_stop(K);
    lua_close(K->L);
    zmq_close(K->shell);
    zmq_close(K->stdin_sock);
    zmq_close(K->wake_main);
    pthread_mutex_lock(&K->iopub_lock);
    zmq_close(K->iopub);
    K->iopub = NULL;
    pthread_mutex_unlock(&K->iopub_lock);
    zmq_ctx_shutdown(K->zctx);
    pthread_join(K->control_thread, NULL);
    pthread_join(K->hb_thread, NULL);
    pthread_join(K->guard_thread, NULL);
    zmq_ctx_term(K->zctx);
    ld_guard_free(K->guard_routers);
    ld_guard_free(K->guard_small);
    json_decref(K->kernel_info);
    kexec_free(K);
    ksigner_free(&K->signer);
    ksighist_free(&K->seen);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ldist kernel -f CONNECTION_FILE\n"
            "       ldist kernel install [--user | --prefix P] [--name N] [--display-name D]\n"
            "                            [--interrupt-mode signal|message]\n"
            "Runs ldist as a Jupyter kernel, or installs its kernelspec so Jupyter finds it.\n");
}

int ldist_kernel_main(int argc, char **argv) {
    int i = 1;
    if (argc > 1 && !strcmp(argv[1], "kernel")) i = 2;
    if (i < argc && !strcmp(argv[i], "install")) return install(argc, argv, i + 1);
    const char *cf = NULL;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-f") || !strcmp(a, "--connection-file")) && i + 1 < argc) cf = argv[++i];
        else if (!strncmp(a, "--connection-file=", 18)) cf = a + 18;
        else if (!strncmp(a, "-f=", 3)) cf = a + 3;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ldist kernel: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!cf) {
        usage(stderr);
        return 2;
    }
    return run(cf);
}
