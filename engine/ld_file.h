/*
 * ld_file.h - writing files that no one else can redirect.
 *
 * Every file ldist writes goes through here (safetensors, dataset caches,
 * images, TensorBoard event files, CSV logs, the REPL history), so a link or
 * file that another user planted in a shared directory is never followed:
 *
 *     ld_wfile w;
 *     if (ld_wfile_begin(&w, path) != LD_OK) return ld_error_status();
 *     fwrite(data, 1, n, w.f);
 *     return ld_wfile_commit(&w);       // or ld_wfile_abort(&w) to drop it
 *
 *  - Replacing PATH: a new temporary file beside it, created with
 *    O_CREAT|O_EXCL|O_NOFOLLOW (any existing name, a planted link included, is
 *    refused) under a name with the pid, a per-process count and random bits
 *    (unguessable, and unique across threads and processes); commit flushes,
 *    syncs and renames it over PATH, which replaces a link at PATH instead of
 *    writing through it. A reader sees the old file or the new one.
 *  - A fresh name (ld_file_create): O_CREAT|O_EXCL|O_NOFOLLOW.
 *  - Appending (ld_file_append): O_APPEND|O_NOFOLLOW, and the file must be a
 *    regular file with one link (a hard link to another file is refused).
 * Errors name the file and leave a message (ld_fail).
 */
#ifndef LD_FILE_H
#define LD_FILE_H

#include "ld_core.h"
#include <stdio.h>

typedef struct {
    FILE *f;       /* write here */
    char *tmp;     /* the temporary file's name (owned) */
    char *path;    /* the name it becomes (owned) */
} ld_wfile;

/* Opens w->f on a new temporary file beside path. On failure w is empty. */
int ld_wfile_begin(ld_wfile *w, const char *path);
/* Flushes, syncs, closes and renames over the path; on failure the temporary
   file is removed and the path keeps its old content. Frees w either way. */
int ld_wfile_commit(ld_wfile *w);
/* Closes and removes the temporary file; frees w. Safe on an empty w. */
void ld_wfile_abort(ld_wfile *w);

/* A new file at path, which must not exist ("wb"); NULL with an error set. */
FILE *ld_file_create(const char *path);
/* path opened for appending ("ab"), created when missing; NULL with an
   error set when it is a link, not a regular file, or has other hard links.
   *created (may be NULL) says whether it was new. */
FILE *ld_file_append(const char *path, int *created);

#endif
