/* test_file.c - engine/ld_file.c, the one way ldist writes files: a
 * temporary file renamed over the path (a link at the path is replaced, never
 * written through; an aborted write leaves nothing), exclusive creation that
 * refuses a planted link, and appending that refuses links and hard links. */
#include "test_util.h"
#include "ld_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *slurp(const char *path) {
    static char buf[256];
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static int is_link(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

int main(void) {
    if (tu_scratch_init("ldist_test_file")) return 1;
    char victim[256];
    snprintf(victim, sizeof victim, "%s", tu_path("victim"));
    tu_write_file(victim, "precious\n", 9);

    TEST("ld_wfile replaces a link at the path instead of writing through it") {
        const char *p = tu_path("replaced");
        CHECK(symlink(victim, p) == 0);
        ld_wfile w;
        CHECK(ld_wfile_begin(&w, p) == LD_OK);
        CHECK(strstr(w.tmp, "replaced.tmp.") != NULL);
        fputs("new\n", w.f);
        CHECK(ld_wfile_commit(&w) == LD_OK);
        CHECK(!strcmp(slurp(victim), "precious\n"));
        CHECK(!is_link(p) && !strcmp(slurp(p), "new\n"));
        CHECK(w.f == NULL && w.tmp == NULL);
    }

    TEST("an aborted ld_wfile leaves the old file and no temporary file") {
        const char *p = tu_path("kept");
        tu_write_file(p, "old\n", 4);
        ld_wfile w;
        CHECK(ld_wfile_begin(&w, p) == LD_OK);
        fputs("half", w.f);
        ld_wfile_abort(&w);
        CHECK(!strcmp(slurp(p), "old\n"));
        CHECK(tu_count_prefixed("kept.tmp") == 0);
    }

    TEST("ld_wfile_begin in a missing folder names the path") {
        ld_wfile w;
        CHECK(ld_wfile_begin(&w, tu_path("no/such/dir/f")) != LD_OK);
        CHECK(tu_contains(ld_error(), "cannot create") && tu_contains(ld_error(), "no/such/dir/f"));
        CHECK(w.f == NULL);
    }

    TEST("ld_file_create refuses a planted link, dangling or not") {
        const char *a = tu_path("planted_a"), *b = tu_path("planted_b");
        CHECK(symlink(victim, a) == 0);
        CHECK(symlink(tu_path("nowhere"), b) == 0);
        CHECK(ld_file_create(a) == NULL);
        CHECK(ld_file_create(b) == NULL);
        CHECK(access(tu_path("nowhere"), F_OK) != 0);
        CHECK(!strcmp(slurp(victim), "precious\n"));
    }

    TEST("ld_file_append refuses a link and a hard link, appends to its own file") {
        const char *l = tu_path("app_link"), *h = tu_path("app_hard"), *own = tu_path("app_own");
        CHECK(symlink(victim, l) == 0);
        CHECK(link(victim, h) == 0);
        CHECK(ld_file_append(l, NULL) == NULL && tu_contains(ld_error(), "symbolic link"));
        CHECK(ld_file_append(h, NULL) == NULL && tu_contains(ld_error(), "hard links"));
        unlink(h);
        CHECK(!strcmp(slurp(victim), "precious\n"));
        int created = -1;
        FILE *f = ld_file_append(own, &created);
        CHECK(f && created == 1);
        if (f) { fputs("a\n", f); fclose(f); }
        f = ld_file_append(own, &created);
        CHECK(f && created == 0);
        if (f) { fputs("b\n", f); fclose(f); }
        CHECK(!strcmp(slurp(own), "a\nb\n"));
    }
    return tu_summary();
}
