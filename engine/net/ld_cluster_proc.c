/* ld_cluster_proc.c - child processes with their output captured line by
   line: the workers of `ldist launch` and of LocalCluster. */
#define _GNU_SOURCE
#include "ld_cluster.h"
#include "ld_core.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define LINE_MAX_BYTES 65536        /* a longer run without a newline is cut */

typedef struct {
    int fd;                         /* -1 once at end of file */
    char *buf;
    size_t len, cap;
} stream;

typedef struct {
    pid_t pid;
    int reaped, status, signal;
    int reported;                   /* the exit event was returned */
    double reaped_at;
    stream s[2];                    /* stdout, stderr */
} child;

struct ld_procs {
    int n;
    child *c;
    char *line;                     /* the last line handed out */
    size_t line_cap;
    int rr;                         /* where the round-robin scan starts */
};

const char *ld_self_exe(void) {
    static char path[4096];
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) return "ldist";
        path[n] = 0;
    }
    return path;
}

/* environ with `extra` set over it (a new array; the strings are shared) */
static char **merged_env(char *const *extra) {
    size_t ne = 0, nx = 0;
    while (environ[ne]) ne++;
    while (extra && extra[nx]) nx++;
    char **env = malloc((ne + nx + 1) * sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ne; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int overridden = 0;
        for (size_t j = 0; j < nx && !overridden; j++)
            overridden = !strncmp(extra[j], environ[i], nl) && extra[j][nl] == '=';
        if (!overridden) env[k++] = environ[i];
    }
    for (size_t j = 0; j < nx; j++) env[k++] = extra[j];
    env[k] = NULL;
    return env;
}

ld_procs *ld_procs_start(int n, char *const *argv, char *const *const *envs, int flags) {
    ld_procs *p = calloc(1, sizeof *p);
    if (!p || !(p->c = calloc((size_t)(n > 0 ? n : 1), sizeof *p->c))) {
        free(p);
        ld_fail(LD_ENOMEM, "out of memory");
        return NULL;
    }
    p->n = n;
    for (int i = 0; i < n; i++) p->c[i].s[0].fd = p->c[i].s[1].fd = -1;
    pid_t parent = getpid();
    for (int i = 0; i < n; i++) {
        int out[2], err[2];
        char **env = merged_env(envs ? envs[i] : NULL);
        if (!env) { ld_fail(LD_ENOMEM, "out of memory"); goto fail; }
        if (pipe2(out, O_CLOEXEC)) { free(env); ld_fail(LD_EIO, "pipe: %s", strerror(errno)); goto fail; }
        if (pipe2(err, O_CLOEXEC)) { close(out[0]); close(out[1]); free(env); ld_fail(LD_EIO, "pipe: %s", strerror(errno)); goto fail; }
        pid_t pid = fork();
        if (pid < 0) {
            close(out[0]); close(out[1]); close(err[0]); close(err[1]); free(env);
            ld_fail(LD_EIO, "fork: %s", strerror(errno));
            goto fail;
        }
        if (pid == 0) {
            /* only async-signal-safe calls from here to exec */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(127);
            if (flags & LD_PROCS_NEW_GROUP) setpgid(0, 0);
            int devnull = open("/dev/null", O_RDONLY);
            if (devnull >= 0) { dup2(devnull, 0); if (devnull > 2) close(devnull); }
            dup2(out[1], 1);
            dup2(err[1], 2);
            /* no descriptor of ours (sockets, a kernel's capture pipes) leaks in */
#ifdef SYS_close_range
            if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
                for (int fd = 3; fd < 4096; fd++) close(fd);
            signal(SIGPIPE, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            execve(argv[0], argv, env);
            static const char msg[] = "ldist: cannot start the worker program\n";
            (void)!write(2, msg, sizeof msg - 1);
            _exit(127);
        }
        free(env);
        close(out[1]);
        close(err[1]);
        fcntl(out[0], F_SETFL, O_NONBLOCK);
        fcntl(err[0], F_SETFL, O_NONBLOCK);
        p->c[i].pid = pid;
        p->c[i].s[0].fd = out[0];
        p->c[i].s[1].fd = err[0];
    }
    return p;
fail:
    ld_procs_free(p, 0);
    return NULL;
}

int ld_procs_count(const ld_procs *p) { return p->n; }
int ld_procs_pid(const ld_procs *p, int i) { return i >= 0 && i < p->n ? (int)p->c[i].pid : 0; }
int ld_procs_alive(const ld_procs *p, int i) { return i >= 0 && i < p->n && p->c[i].pid > 0 && !p->c[i].reaped; }
int ld_procs_running(const ld_procs *p) {
    int k = 0;
    for (int i = 0; i < p->n; i++) k += p->c[i].pid > 0 && !p->c[i].reaped;
    return k;
}

void ld_procs_signal(ld_procs *p, int sig) {
    for (int i = 0; i < p->n; i++)
        if (p->c[i].pid > 0 && !p->c[i].reaped) kill(p->c[i].pid, sig);
}

static void reap(ld_procs *p) {
    for (int i = 0; i < p->n; i++) {
        child *c = &p->c[i];
        if (c->pid <= 0 || c->reaped) continue;
        int st;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r == c->pid) {
            c->reaped = 1;
            c->reaped_at = ld_now();
            if (WIFSIGNALED(st)) { c->signal = WTERMSIG(st); c->status = 128 + c->signal; }
            else c->status = WEXITSTATUS(st);
        } else if (r < 0 && errno == ECHILD) {
            c->reaped = 1;          /* someone else reaped it */
            c->reaped_at = ld_now();
            c->status = 255;
        }
    }
}

/* a complete line in stream s, copied out to p->line */
static int take_line(ld_procs *p, stream *s, int at_eof, ld_proc_event *ev) {
    size_t i = 0;
    while (i < s->len && s->buf[i] != '\n' && s->buf[i] != '\r') i++;
    int complete = i < s->len;
    if (!complete && !(at_eof && s->len) && s->len < LINE_MAX_BYTES) return 0;
    if (p->line_cap < i + 1) {
        char *b = realloc(p->line, i + 1);
        if (!b) return 0;
        p->line = b;
        p->line_cap = i + 1;
    }
    memcpy(p->line, s->buf, i);
    p->line[i] = 0;
    ev->line = p->line;
    ev->len = i;
    ev->end = complete ? s->buf[i] : 0;
    size_t used = complete ? i + 1 : i;
    memmove(s->buf, s->buf + used, s->len - used);
    s->len -= used;
    return 1;
}

static void read_stream(stream *s) {
    for (;;) {
        if (s->cap - s->len < 4096) {
            size_t cap = s->cap ? 2 * s->cap : 8192;
            char *b = realloc(s->buf, cap);
            if (!b) return;
            s->buf = b;
            s->cap = cap;
        }
        ssize_t r = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (r > 0) { s->len += (size_t)r; if (s->len >= LINE_MAX_BYTES) return; continue; }
        if (r == 0) { close(s->fd); s->fd = -1; return; }
        if (errno == EINTR) continue;
        if (errno != EAGAIN) { close(s->fd); s->fd = -1; }
        return;
    }
}

/* an event already available (lines buffered, exits after their output) */
static int pending_event(ld_procs *p, ld_proc_event *ev) {
    for (int k = 0; k < p->n; k++) {
        int i = (p->rr + k) % p->n;
        child *c = &p->c[i];
        for (int q = 0; q < 2; q++) {
            if (take_line(p, &c->s[q], c->s[q].fd < 0, ev)) {
                ev->index = i;
                ev->kind = q ? LD_PROC_ERR : LD_PROC_OUT;
                p->rr = (i + 1) % p->n;
                return 1;
            }
        }
    }
    double t = ld_now();
    for (int i = 0; i < p->n; i++) {
        child *c = &p->c[i];
        /* an exit after the child's last line; a grandchild holding the
           pipes open delays it by at most a second */
        if (c->reaped && !c->reported &&
            ((c->s[0].fd < 0 && c->s[1].fd < 0 && !c->s[0].len && !c->s[1].len) || t - c->reaped_at > 1.0)) {
            c->reported = 1;
            memset(ev, 0, sizeof *ev);
            ev->index = i;
            ev->kind = LD_PROC_EXIT;
            ev->status = c->status;
            ev->signal = c->signal;
            return 1;
        }
    }
    return 0;
}

int ld_procs_poll(ld_procs *p, double timeout, ld_proc_event *ev) {
    double t0 = ld_now();
    for (;;) {
        reap(p);
        if (pending_event(p, ev)) return 1;
        double left = timeout < 0 ? 1 : timeout - (ld_now() - t0);
        struct pollfd fds[2 * 256];
        stream *ss[2 * 256];
        int nf = 0;
        for (int i = 0; i < p->n && nf < 2 * 256; i++)
            for (int q = 0; q < 2; q++)
                if (p->c[i].s[q].fd >= 0) {
                    fds[nf].fd = p->c[i].s[q].fd;
                    fds[nf].events = POLLIN;
                    fds[nf].revents = 0;
                    ss[nf++] = &p->c[i].s[q];
                }
        /* always look at the pipes once, even with no time left; exits are
           seen by polling waitpid, so wake at least every 50 ms */
        int ms = left <= 0 ? 0 : left > 0.05 ? 50 : (int)(left * 1000);
        int rc = poll(fds, (nfds_t)nf, ms);
        if (rc > 0)
            for (int k = 0; k < nf; k++)
                if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(ss[k]);
        if (left <= 0) {
            reap(p);
            return pending_event(p, ev);
        }
    }
}

void ld_procs_free(ld_procs *p, double grace) {
    if (!p) return;
    reap(p);
    if (ld_procs_running(p)) {
        ld_procs_signal(p, SIGTERM);
        double t0 = ld_now();
        while (ld_procs_running(p) && ld_now() - t0 < grace) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            reap(p);
        }
        if (ld_procs_running(p)) {
            ld_procs_signal(p, SIGKILL);
            for (int i = 0; i < p->n; i++)
                if (p->c[i].pid > 0 && !p->c[i].reaped) { waitpid(p->c[i].pid, NULL, 0); p->c[i].reaped = 1; }
        }
    }
    for (int i = 0; i < p->n; i++)
        for (int q = 0; q < 2; q++) {
            if (p->c[i].s[q].fd >= 0) close(p->c[i].s[q].fd);
            free(p->c[i].s[q].buf);
        }
    free(p->line);
    free(p->c);
    free(p);
}
