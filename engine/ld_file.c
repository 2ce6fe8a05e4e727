/*
 * ld_file.c - temporary-and-rename, exclusive creation and safe appending
 * (see ld_file.h).
 */
#include "ld_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WFLAGS (O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC)

/* Mode 0666 less the umask, as fopen would give. */
int ld_wfile_begin(ld_wfile *w, const char *path) {
    static unsigned long count;
    memset(w, 0, sizeof *w);
    if (!path || !*path) return ld_fail(LD_EARG, "no file name given");
    size_t cap = strlen(path) + 64;
    char *tmp = malloc(cap), *dup = strdup(path);
    if (!tmp || !dup) { free(tmp); free(dup); return ld_fail(LD_ENOMEM, "out of memory writing '%s'", path); }
    int fd = -1;
    for (int attempt = 0; attempt < 64 && fd < 0; attempt++) {
        unsigned long c = __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED);
        uint32_t r[2] = {0, 0};
        if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            r[0] = (uint32_t)ts.tv_nsec ^ (uint32_t)(uintptr_t)&ts;
            r[1] = (uint32_t)ts.tv_sec * 2654435761u;
        }
        snprintf(tmp, cap, "%s.tmp.%ld.%lu.%08x%08x", path, (long)getpid(), c, r[0], r[1]);
        fd = open(tmp, WFLAGS, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int er = errno;
        ld_fail(LD_EIO, "cannot create '%s': %s", path, strerror(er));
        free(tmp); free(dup);
        return LD_EIO;
    }
    if (!(w->f = fdopen(fd, "wb"))) {
        int er = errno;
        close(fd);
        unlink(tmp);
        free(tmp); free(dup);
        return ld_fail(LD_EIO, "cannot write '%s': %s", path, strerror(er));
    }
    w->tmp = tmp;
    w->path = dup;
    return LD_OK;
}

static void wfile_free(ld_wfile *w) {
    free(w->tmp);
    free(w->path);
    memset(w, 0, sizeof *w);
}

void ld_wfile_abort(ld_wfile *w) {
    if (w->f) fclose(w->f);
    if (w->tmp) unlink(w->tmp);
    wfile_free(w);
}

int ld_wfile_commit(ld_wfile *w) {
    if (!w->f) { wfile_free(w); return ld_fail(LD_EARG, "the file is not open for writing"); }
    int ok = fflush(w->f) == 0 && !ferror(w->f) && fsync(fileno(w->f)) == 0;
    int er = errno;
    if (fclose(w->f) != 0 && ok) { ok = 0; er = errno; }
    w->f = NULL;
    if (!ok) {
        ld_fail(LD_EIO, "cannot write '%s': %s", w->path, strerror(er ? er : EIO));
        unlink(w->tmp);
        wfile_free(w);
        return LD_EIO;
    }
    if (rename(w->tmp, w->path) != 0) {
        er = errno;
        ld_fail(LD_EIO, "cannot rename '%s' to '%s': %s", w->tmp, w->path, strerror(er));
        unlink(w->tmp);
        wfile_free(w);
        return LD_EIO;
    }
    /* Make the rename itself durable (best effort: not every file system allows it). */
    char *slash = strrchr(w->path, '/');
    const char *dn = slash ? (slash == w->path ? "/" : (*slash = 0, w->path)) : ".";
    int dfd = open(dn, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    wfile_free(w);
    return LD_OK;
}

FILE *ld_file_create(const char *path) {
    if (!path || !*path) { ld_fail(LD_EARG, "no file name given"); return NULL; }
    int fd = open(path, WFLAGS, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int er = errno;
        if (fd >= 0) { close(fd); unlink(path); }
        ld_fail(LD_EIO, "cannot create '%s': %s", path, strerror(er));
        errno = er;                    /* callers retry another name on EEXIST */
    }
    return f;
}

FILE *ld_file_append(const char *path, int *created) {
    if (!path || !*path) { ld_fail(LD_EARG, "no file name given"); return NULL; }
    int isnew = 1;
    int fd = open(path, WFLAGS, 0666);
    if (fd < 0 && errno == EEXIST) {
        isnew = 0;
        fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0) {
        int er = errno;
        if (er == ELOOP) ld_fail(LD_EIO, "cannot append to '%s': it is a symbolic link", path);
        else ld_fail(LD_EIO, "cannot append to '%s': %s", path, strerror(er));
        return NULL;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
    else if (st.st_nlink != 1) why = "it has other hard links";
    /* O_NONBLOCK only kept a FIFO from blocking the open */
    if (!why && fcntl(fd, F_SETFL, O_APPEND) != 0) why = strerror(errno);
    FILE *f = why ? NULL : fdopen(fd, "ab");
    if (!f) {
        if (!why) why = strerror(errno);
        ld_fail(LD_EIO, "cannot append to '%s': %s", path, why);
        close(fd);
        return NULL;
    }
    if (created) *created = isnew;
    return f;
}
