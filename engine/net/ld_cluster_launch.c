/* ld_cluster_launch.c - `ldist launch`: start a local cluster of ldist
   processes running one script, each told its place by TF_CONFIG (the JSON
   TensorFlow reads, as is), sharing a fresh secret; forward their output
   with a prefix; when one fails, give the others a grace period to notice
   and report it, then stop them; exit non-zero if any failed. */
#include "ld_cluster.h"
#include "ld_core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ldist launch [-n N] [--chief] [--ps M] [--host ADDR] [--port P] [--timeout S] [--grace S]\n"
            "                    [--] script.lua [args...]\n"
            "Start N ldist processes running the script as one cluster (MultiWorkerMirroredStrategy):\n"
            "each gets TF_CONFIG (TensorFlow's cluster description) and a shared secret (LDIST_SECRET).\n"
            "  -n N          processes that train (default 2)\n"
            "  --chief       the first of them is the chief (TF's \"chief\" task); the rest are workers\n"
            "  --ps M        M more processes of type \"ps\" (parameter servers); without --chief, one more\n"
            "                process, the chief, coordinates (ParameterServerStrategy)\n"
            "  --host ADDR   the address to listen on (default 127.0.0.1: this machine only)\n"
            "  --port P      ports P, P+1, ... (default: free ports)\n"
            "  --timeout S   seconds before a collective that makes no progress fails (LDIST_TIMEOUT, default 30)\n"
            "  --grace S     seconds the others get to stop by themselves after one fails (default 15)\n"
            "Output lines are prefixed with the worker's index: \"[1] ...\". The exit status is 0 when\n"
            "every process succeeded, else that of the first one that failed. Each process takes 1/N\n"
            "of the cores, pinned there (LDIST_NUM_THREADS=T: T threads each, not pinned).\n"
            "Under Slurm (srun) or mpirun, `ldist launch script.lua` runs the script as the one process\n"
            "of this task: its rank comes from SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE or\n"
            "PMI_RANK/PMI_SIZE, and LDIST_SECRET must be set the same everywhere.\n");
}

/* ---- a task's death, told once (LDIST_LAUNCH_NOTES) ---- */
/* dir/task-<q> holds how task q died, for the survivors' fit message */
static int write_note(const char *dir, int q, const char *what) {
    if (!dir[0]) return 0;
    char path[96], tmp[112];
    snprintf(path, sizeof path, "%s/task-%d", dir, q);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wx");
    if (!f) return 0;
    int ok = fputs(what, f) >= 0;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0;
}
/* a survivor said it (it made dir/told) */
static int note_told(const char *dir) {
    char path[96];
    snprintf(path, sizeof path, "%s/told", dir);
    return dir[0] && access(path, F_OK) == 0;
}
static void remove_notes(const char *dir, int total) {
    if (!dir[0]) return;
    char path[112];
    for (int q = 0; q < total; q++) {
        snprintf(path, sizeof path, "%s/task-%d", dir, q);
        unlink(path);
        snprintf(path, sizeof path, "%s/task-%d.tmp", dir, q);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/told", dir);
    unlink(path);
    rmdir(dir);
}
/* the launcher's own line: no survivor told it (a task that failed outside
   fit, or survivors that did not notice) */
static void tell_death(const char *death, double grace_left) {
    fflush(stdout);
    fprintf(stderr, "ldist launch: %s", death);
    if (grace_left >= 0) fprintf(stderr, "; the others get %.0f s to stop", grace_left);
    fputc('\n', stderr);
    fflush(stderr);
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

/* Can a listener bind host:port now? port 0: any; -> the port, or -1 */
static int try_bind(const struct sockaddr_in *host, int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_in a = *host;
    a.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof a;
    int got = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0) got = ntohs(a.sin_port);
    close(s);
    return got;
}

/* A port for a listener that another process binds later. Not one of the
   kernel's ephemeral ports (what bind to port 0 returns): until the listener
   binds it, any connect() on the machine may take it as its local port (a
   worker connecting to the leader took the port handed to the next worker:
   "Address already in use"). So a free port just below the ephemeral range
   (/proc/sys/net/ipv4/ip_local_port_range): from a random place, then on
   upwards, so this process hands out no port twice while that range lasts;
   port 0's answer where the range is too small. */
int ld_free_port(const char *host) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    if (inet_pton(AF_INET, strcmp(host, "localhost") ? host : "127.0.0.1", &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static int next = -1;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) { if (fscanf(f, "%d", &lo) != 1) lo = 32768; fclose(f); }
    int base = lo - 12000 < 10000 ? 10000 : lo - 12000, span = lo - base;
    if (span >= 1000) {
        pthread_mutex_lock(&mu);
        if (next < 0) {
            uint32_t r = 0;
            if (ld_random_bytes(&r, sizeof r) != LD_OK) r = (uint32_t)getpid() * 2654435761u;
            next = (int)(r % (uint32_t)span);
        }
        for (int k = 0; k < 256; k++) {
            int port = base + next % span;
            next = (next + 1) % span;
            if (try_bind(&a, port) != port) continue;
            pthread_mutex_unlock(&mu);
            return port;
        }
        pthread_mutex_unlock(&mu);
    }
    return try_bind(&a, 0);
}

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : -1;
}

typedef struct { const char *type; int index; } task;

int ld_launch_main(int argc, char **argv) {
    int n = -1, nps = 0, chief = 0, port = 0;
    const char *host = "127.0.0.1";
    double timeout = 0, grace = 15;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!v) { fprintf(stderr, "ldist launch: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--nproc") || !strcmp(a, "--workers")) { NEED_VALUE(); n = atoi(v); }
        else if (!strncmp(a, "-n", 2) && a[2] >= '0' && a[2] <= '9') n = atoi(a + 2);
        else if (!strcmp(a, "--ps")) { NEED_VALUE(); nps = atoi(v); }
        else if (!strcmp(a, "--chief")) chief = 1;
        else if (!strcmp(a, "--host")) { NEED_VALUE(); host = v; }
        else if (!strcmp(a, "--port")) { NEED_VALUE(); port = atoi(v); }
        else if (!strcmp(a, "--timeout")) { NEED_VALUE(); timeout = atof(v); }
        else if (!strcmp(a, "--grace")) { NEED_VALUE(); grace = atof(v); }
        else if (!strcmp(a, "--")) { i++; break; }
        else break;
#undef NEED_VALUE
    }
    if (i >= argc) {
        fprintf(stderr, "ldist launch: no script to run\n");
        usage(stderr);
        return 2;
    }
    char timeout_env[64] = "";
    if (timeout > 0) snprintf(timeout_env, sizeof timeout_env, "LDIST_TIMEOUT=%g", timeout);

    /* Slurm or mpirun started this process: it is one task of the cluster */
    int ext_size = env_int("SLURM_NTASKS");
    if (ext_size < 0) ext_size = env_int("OMPI_COMM_WORLD_SIZE");
    if (ext_size < 0) ext_size = env_int("PMI_SIZE");
    if (n < 0 && ext_size > 1) {
        if (!getenv("LDIST_SECRET") && !getenv("LDIST_SECRET_FILE")) {
            fprintf(stderr, "ldist launch: %d tasks started by Slurm/mpirun need a shared secret: set LDIST_SECRET "
                    "(e.g. export LDIST_SECRET=$(openssl rand -hex 32)) before srun/mpirun\n", ext_size);
            return 2;
        }
        if (timeout_env[0]) putenv(timeout_env);
        char **args = calloc((size_t)(argc - i + 2), sizeof *args);
        if (!args) return 1;
        args[0] = (char *)ld_self_exe();
        for (int k = i; k < argc; k++) args[k - i + 1] = argv[k];
        execv(args[0], args);
        fprintf(stderr, "ldist launch: cannot run %s: %s\n", args[0], strerror(errno));
        return 1;
    }
    if (n < 0) n = 2;
    if (n < 1 || n > 256 || nps < 0 || nps > 64) {
        fprintf(stderr, "ldist launch: -n must be in 1..256 and --ps in 0..64\n");
        return 2;
    }
    /* ParameterServerStrategy: with ps tasks and no --chief, a chief (TF's
       coordinator, which runs the script's training loop) joins the N workers */
    if (nps > 0 && !chief) { chief = 1; n++; }
    int total = n + nps;

    /* the cluster: addresses and types, in TF_CONFIG's order */
    task *tasks = calloc((size_t)total, sizeof *tasks);
    int *ports = calloc((size_t)total, sizeof *ports);
    if (!tasks || !ports) return 1;
    for (int k = 0; k < total; k++) {
        if (k < chief) tasks[k] = (task){"chief", 0};
        else if (k < n) tasks[k] = (task){"worker", k - chief};
        else tasks[k] = (task){"ps", k - n};
        ports[k] = port > 0 ? port + k : ld_free_port(host);
        if (ports[k] <= 0 || ports[k] > 65535) {
            fprintf(stderr, "ldist launch: no free port on %s\n", host);
            return 1;
        }
    }
    size_t clen = 64 + (size_t)total * 80;
    char *cluster = malloc(clen);
    if (!cluster) return 1;
    size_t k = (size_t)snprintf(cluster, clen, "{");
    static const char *const types[] = {"chief", "worker", "ps"};
    int ntypes = 0;
    for (int t = 0; t < 3; t++) {
        int any = 0;
        for (int q = 0; q < total; q++) {
            if (strcmp(tasks[q].type, types[t])) continue;
            if (!any) k += (size_t)snprintf(cluster + k, clen - k, "%s\"%s\": [", ntypes++ ? ", " : "", types[t]);
            k += (size_t)snprintf(cluster + k, clen - k, "%s\"%s:%d\"", any ? ", " : "", host, ports[q]);
            any = 1;
        }
        if (any) k += (size_t)snprintf(cluster + k, clen - k, "]");
    }
    snprintf(cluster + k, clen - k, "}");

    char secret_env[128];
    const char *given = getenv("LDIST_SECRET");
    if (given && strlen(given) >= 16) {
        snprintf(secret_env, sizeof secret_env, "LDIST_SECRET=%s", given);
    } else {
        unsigned char raw[32];
        if (ld_random_bytes(raw, sizeof raw)) { fprintf(stderr, "ldist launch: %s\n", ld_error()); return 1; }
        strcpy(secret_env, "LDIST_SECRET=");
        for (int b = 0; b < 32; b++) sprintf(secret_env + 13 + 2 * b, "%02x", raw[b]);
    }
    /* each task takes 1/total of the cores, pinned there (ld_pool.c), unless
       LDIST_NUM_THREADS (inherited) says how many threads each uses */
    char size_env[64];
    snprintf(size_env, sizeof size_env, "LDIST_LOCAL_SIZE=%d", total);

    /* How a task died goes into a private directory (LDIST_LAUNCH_NOTES), so
       that a survivor whose fit stops for it says it in its one message
       (which worker, pid, signal, step, epoch) and marks it told; this
       launcher then prints nothing more of it. */
    char notes[64] = "", notes_env[96] = "";
    const char *tmpdir = getenv("TMPDIR");
    snprintf(notes, sizeof notes, "%s/ldist-launch-XXXXXX", tmpdir && *tmpdir && strlen(tmpdir) < 40 ? tmpdir : "/tmp");
    if (mkdtemp(notes)) snprintf(notes_env, sizeof notes_env, "LDIST_LAUNCH_NOTES=%s", notes);
    else notes[0] = 0;

    char ***envs = calloc((size_t)total, sizeof *envs);
    char **labels = calloc((size_t)total, sizeof *labels);
    if (!envs || !labels) return 1;
    for (int q = 0; q < total; q++) {
        char **e = calloc(9, sizeof *e);
        size_t tl = strlen(cluster) + 120;
        char *tf = malloc(tl), *lr = malloc(48), *lab = malloc(32);
        if (!e || !tf || !lr || !lab) return 1;
        snprintf(tf, tl, "TF_CONFIG={\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}", cluster, tasks[q].type,
                 tasks[q].index);
        snprintf(lr, 48, "LDIST_LOCAL_RANK=%d", q);
        if (chief || nps) snprintf(lab, 32, "[%s %d] ", tasks[q].type, tasks[q].index);
        else snprintf(lab, 32, "[%d] ", q);
        int m = 0;
        e[m++] = tf;
        e[m++] = secret_env;
        e[m++] = lr;
        e[m++] = size_env;
        if (timeout_env[0]) e[m++] = timeout_env;
        /* this launcher reports a task's death once: the tasks' cluster layer keeps quiet about it */
        e[m++] = "LDIST_SUPERVISED=1";
        if (notes_env[0]) e[m++] = notes_env;
        e[m] = NULL;
        envs[q] = e;
        labels[q] = lab;
    }
    char **args = calloc((size_t)(argc - i + 2), sizeof *args);
    if (!args) return 1;
    args[0] = (char *)ld_self_exe();
    for (int q = i; q < argc; q++) args[q - i + 1] = argv[q];

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    ld_procs *p = ld_procs_start(total, args, (char *const *const *)envs, 0);
    if (!p) { fprintf(stderr, "ldist launch: %s\n", ld_error()); return 1; }
    int *status = calloc((size_t)total, sizeof *status), *sigs = calloc((size_t)total, sizeof *sigs);
    int *done = calloc((size_t)total, sizeof *done);
    if (!status || !sigs || !done) return 1;
    int first_fail = -1, finished = 0, stage = 0, signals_seen = 0, pending = 0, told = 0;
    double deadline = 0, died_at = 0;
    char death[160] = "";
    while (finished < total) {
        ld_proc_event ev;
        int got = ld_procs_poll(p, 0.2, &ev);
        if (got && (ev.kind == LD_PROC_OUT || ev.kind == LD_PROC_ERR)) {
            FILE *out = ev.kind == LD_PROC_OUT ? stdout : stderr;
            fputs(labels[ev.index], out);
            fwrite(ev.line, 1, ev.len, out);
            fputc(ev.end ? ev.end : '\n', out);
            fflush(out);
        } else if (got && ev.kind == LD_PROC_EXIT) {
            done[ev.index] = 1;
            status[ev.index] = ev.status;
            sigs[ev.index] = ev.signal;
            finished++;
            if (ev.status != 0 && first_fail < 0 && stage == 0) {
                first_fail = ev.index;
                if (ev.signal)
                    snprintf(death, sizeof death, "%s %d (pid %d) was killed by signal %d (%s)", tasks[ev.index].type,
                             tasks[ev.index].index, ld_procs_pid(p, ev.index), ev.signal, strsignal(ev.signal));
                else
                    snprintf(death, sizeof death, "%s %d (pid %d) failed with exit status %d", tasks[ev.index].type,
                             tasks[ev.index].index, ld_procs_pid(p, ev.index), ev.status);
                pending = finished < total && write_note(notes, ev.index, death);
                if (!pending) tell_death(death, finished < total ? grace : -1);
                deadline = ld_now() + grace;
                died_at = ld_now();
                stage = 1;
            }
        }
        if (pending && note_told(notes)) { pending = 0; told = 1; }
        if (pending && (ld_now() > died_at + 3 || finished == total)) {   /* no survivor told it (yet) */
            pending = 0;
            tell_death(death, finished < total ? deadline - ld_now() : -1);
        }
        if (got_signal) {
            int sig = got_signal;
            got_signal = 0;
            signals_seen++;
            if (first_fail < 0) first_fail = -2;
            /* Ctrl-C on a terminal reaches the workers too (same process
               group); a signal sent to the launcher alone is passed on */
            ld_procs_signal(p, signals_seen > 1 ? SIGKILL : sig == SIGINT ? SIGINT : SIGTERM);
            if (stage == 0) { stage = 1; deadline = ld_now() + 5; }
        }
        if (stage == 1 && finished < total && ld_now() > deadline) {
            fprintf(stderr, "ldist launch: stopping the %d process(es) still running\n", total - finished);
            ld_procs_signal(p, SIGTERM);
            stage = 2;
            deadline = ld_now() + 3;
        } else if (stage == 2 && finished < total && ld_now() > deadline) {
            ld_procs_signal(p, SIGKILL);
            stage = 3;
        }
    }
    if (pending && !note_told(notes)) tell_death(death, -1);
    else if (pending) told = 1;
    remove_notes(notes, total);
    int rc = 0;
    if (first_fail != -1 && !told) {
        fprintf(stderr, "ldist launch: ");
        for (int q = 0; q < total; q++) {
            fprintf(stderr, "%s%s %d ", q ? ", " : "", tasks[q].type, tasks[q].index);
            if (sigs[q]) fprintf(stderr, "killed by %s", strsignal(sigs[q]));
            else fprintf(stderr, "exit %d", status[q]);
        }
        fputc('\n', stderr);
        rc = first_fail >= 0 ? status[first_fail] : 1;
        for (int q = 0; q < total && !rc; q++) rc = status[q];
        if (!rc) rc = 1;
    } else if (first_fail != -1) {
        rc = status[first_fail] ? status[first_fail] : 1;
    } else {
        for (int q = 0; q < total && !rc; q++) rc = status[q];
    }
    ld_procs_free(p, 1);
    return rc;
}
