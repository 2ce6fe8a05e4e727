/*
 * repl.c - the interactive loop: read a chunk (one or more lines), run it,
 * print what an expression returned.
 *
 * Input is compiled by ldist_load_cell (lua_bindings/state.c), the Jupyter
 * kernel's compiler too: `return <input>`, then the last statement as an
 * expression (`tensor.seed(1); tensor.normal(2, 3)` shows the tensor), then
 * statements; values are printed unless the input ends with ';'; `?x`,
 * `x?` and `help x` show help. When an attempt fails only because the input
 * ended early (the message ends in "<eof>", as lua.c checks), another line
 * is read with the secondary prompt; any other syntax error is reported at
 * once.
 *
 * Lines are read with readline's callback interface in a select() loop, so
 * that Ctrl-C at the prompt can drop the line (or an unfinished chunk) without
 * readline's own signal handling in the way; while code runs, ldist_docall's
 * handler turns Ctrl-C into an "interrupted" error.
 *
 * History lives in ~/.ldist_history ($LDIST_HISTORY overrides; empty turns
 * it off), at most REPL_HISTORY_MAX entries, appended after every chunk so a
 * crash loses nothing. readline reads the file but this file writes it:
 * readline's writers follow a link planted at the name (or at their
 * predictable "<name>-<pid>.tmp"); ours append without following links and
 * trim through a temporary file renamed over the name (engine/ld_file.h).
 */
#include "repl.h"
#include "ldist.h"
#include "ld_core.h"
#include "ld_file.h"

#include <lauxlib.h>
#include <readline/history.h>
#include <readline/readline.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

#define REPL_HISTORY_MAX 1000
#define REPL_PROMPT "> "
#define REPL_PROMPT2 ">> "

/* ---- reading lines -------------------------------------------------------- */

static volatile sig_atomic_t prompt_sigint;
static char *rl_result;
static int rl_finished;
static int use_readline;
static lua_State *unfinished_L;   /* a deferred state (ldist_newstate_deferred) until the prompt shows */
static int unfinished_failed;

/* Once the prompt is on the screen: finish the state, before any key is read
   (a key typed meanwhile waits in the terminal). 0 when it failed (reported). */
static int finish_state(void) {
    lua_State *L = unfinished_L;
    unfinished_L = NULL;
    if (!L || ldist_finish_state(L) == LUA_OK) return 1;
    unfinished_failed = 1;   /* reported */
    return 0;
}

static void on_prompt_sigint(int sig) {
    (void)sig;
    prompt_sigint = 1;
}

static void on_line(char *line) {
    rl_result = line;
    rl_finished = 1;
    rl_callback_handler_remove();
}

enum { READ_OK, READ_EOF, READ_INTERRUPT };

/* Read one line (malloc'd, without the newline) into *out. */
static int read_line(const char *prompt, char **out) {
    *out = NULL;
    fflush(stdout);
    if (!use_readline) {
        /* not a terminal: plain lines, prompts still shown (like python -i) */
        char buf[4096];
        fputs(prompt, stdout);
        fflush(stdout);
        if (!finish_state()) return READ_EOF;
        size_t cap = 0, len = 0;
        char *s = NULL;
        while (fgets(buf, sizeof buf, stdin)) {
            size_t n = strlen(buf);
            if (len + n + 1 > cap) {
                cap = (len + n + 1) * 2;
                char *t = realloc(s, cap);
                if (!t) break;
                s = t;
            }
            memcpy(s + len, buf, n + 1);
            len += n;
            if (n && buf[n - 1] == '\n') break;
        }
        if (!s) return READ_EOF;
        if (len && s[len - 1] == '\n') s[--len] = '\0';
        *out = s;
        return READ_OK;
    }

    prompt_sigint = 0;                  /* a Ctrl-C while output was printed is gone */
    rl_finished = 0;
    rl_result = NULL;
    rl_callback_handler_install(prompt, on_line);
    if (!finish_state()) {
        rl_callback_handler_remove();
        return READ_EOF;
    }
    int status = READ_OK;
    while (!rl_finished) {
        fd_set fds;
        FD_ZERO(&fds);
        int fd = fileno(rl_instream ? rl_instream : stdin);
        FD_SET(fd, &fds);
        int r = select(fd + 1, &fds, NULL, NULL, NULL);
        if (prompt_sigint) {
            /* Ctrl-C: drop the line, as Python's readline module does */
            prompt_sigint = 0;
            rl_free_line_state();
            rl_callback_sigcleanup();
            rl_cleanup_after_signal();
            rl_callback_handler_remove();
            fputs("^C\n", rl_outstream ? rl_outstream : stdout);
            fflush(rl_outstream ? rl_outstream : stdout);
            status = READ_INTERRUPT;
            break;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            rl_callback_handler_remove();
            status = READ_EOF;
            break;
        }
        rl_callback_read_char();
    }
    if (status == READ_OK) {
        if (!rl_result) return READ_EOF;      /* Ctrl-D on an empty line */
        *out = rl_result;
    }
    return status;
}

/* ---- history --------------------------------------------------------------- */

static char *history_path;

static void history_init(void) {
    const char *env = getenv("LDIST_HISTORY");
    if (env) {
        if (*env) history_path = strdup(env);
    } else {
        const char *home = getenv("HOME");
        if (home && *home) {
            size_t n = strlen(home) + sizeof "/.ldist_history";
            history_path = malloc(n);
            if (history_path) snprintf(history_path, n, "%s/.ldist_history", home);
        }
    }
    using_history();
    stifle_history(REPL_HISTORY_MAX);
    /* Timestamps delimit entries in the file, so a multi-line chunk comes
       back as one entry. */
    history_write_timestamps = 1;
    history_multiline_entries = 1;
    /* another user's link (or hard link) is neither read nor written */
    struct stat st;
    if (history_path && lstat(history_path, &st) == 0 && (!S_ISREG(st.st_mode) || st.st_nlink != 1)) {
        fprintf(stderr, "ldist: history not saved: '%s' is %s\n", history_path,
                S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISREG(st.st_mode) ? "a file with other hard links" : "not a regular file");
        free(history_path);
        history_path = NULL;
    }
    if (history_path) read_history(history_path);
}

/* One entry as readline's write_history writes it: its timestamp line when
   it has one, then the text (whose own newlines stay: a multi-line chunk). */
static int history_write_entry(FILE *f, const HIST_ENTRY *e) {
    if (history_write_timestamps && e->timestamp && e->timestamp[0] && fprintf(f, "%s\n", e->timestamp) < 0) return -1;
    return fprintf(f, "%s\n", e->line) < 0 ? -1 : 0;
}

static void history_warn(void) {
    fprintf(stderr, "ldist: history not saved: %s\n", ld_error());
    free(history_path);
    history_path = NULL;                  /* one warning, not one per line */
}

/* Keep the file's last REPL_HISTORY_MAX lines (as history_truncate_file). */
static void history_trim(void) {
    int fd = open(history_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    FILE *in = fdopen(fd, "rb");
    if (!in) { close(fd); return; }
    char *buf = NULL;
    size_t n = 0, cap = 0, r;
    char chunk[65536];
    while ((r = fread(chunk, 1, sizeof chunk, in)) > 0) {
        if (n + r > cap) {
            char *nb = realloc(buf, cap = (n + r) * 2);
            if (!nb) { free(buf); fclose(in); return; }
            buf = nb;
        }
        memcpy(buf + n, chunk, r);
        n += r;
    }
    fclose(in);
    size_t start = n, lines = 0;
    if (start > 0 && buf[start - 1] == '\n') start--;
    while (start > 0) {
        if (buf[start - 1] == '\n' && ++lines == REPL_HISTORY_MAX) break;
        start--;
    }
    if (start > 0) {
        ld_wfile w;
        if (ld_wfile_begin(&w, history_path) != LD_OK) { free(buf); history_warn(); return; }
        if (fwrite(buf + start, 1, n - start, w.f) != n - start) ld_wfile_abort(&w);
        else if (ld_wfile_commit(&w) != LD_OK) history_warn();
    }
    free(buf);
}

static void history_add(const char *chunk) {
    if (!*chunk) return;
    HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
    if (last && strcmp(last->line, chunk) == 0) return;
    add_history(chunk);
    if (!history_path) return;
    FILE *f = ld_file_append(history_path, NULL);
    if (!f) { history_warn(); return; }
    history_write_entry(f, history_get(history_base + history_length - 1));
    struct stat st;
    int big = fflush(f) == 0 && fstat(fileno(f), &st) == 0 && st.st_size > (off_t)REPL_HISTORY_MAX * 200;
    fclose(f);
    /* keep the file near the limit without rewriting it every time */
    if (big) history_trim();
}

static void history_close(void) {
    if (history_path) history_trim();
}

/* ---- chunks ---------------------------------------------------------------- */

typedef enum { CHUNK_EXPR, CHUNK_NONE, CHUNK_EOF } chunk_kind;

/* Read lines until they form a chunk; leave the compiled function on the
   stack (CHUNK_EXPR: whatever it returns is shown). *quiet is set when the
   input ends in ';'.
   CHUNK_NONE: nothing to run (empty line, Ctrl-C, a syntax error already
   reported). */
static chunk_kind read_chunk(lua_State *L, int *quiet) {
    const char *p1 = REPL_PROMPT, *p2 = REPL_PROMPT2;
    /* raw reads: an __index on _G (a "strict" module) must not raise here,
       outside any protected call */
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
    lua_pushliteral(L, "_PROMPT");
    if (lua_rawget(L, -2) == LUA_TSTRING) p1 = lua_tostring(L, -1);
    lua_pushliteral(L, "_PROMPT2");
    if (lua_rawget(L, -3) == LUA_TSTRING) p2 = lua_tostring(L, -1);
    char pr1[128], pr2[128];
    snprintf(pr1, sizeof pr1, "%s", p1);
    snprintf(pr2, sizeof pr2, "%s", p2);
    lua_pop(L, 3);

    char *line;
    int st = read_line(pr1, &line);
    if (st == READ_EOF) return CHUNK_EOF;
    if (st == READ_INTERRUPT) return CHUNK_NONE;

    lua_pushstring(L, line);                      /* the chunk so far */
    free(line);
    for (;;) {
        const char *src = lua_tostring(L, -1);
        const char *q = src;
        while (isspace((unsigned char)*q)) q++;
        if (*q == '\0') {
            lua_pop(L, 1);
            return CHUNK_NONE;
        }
        /* the kernel's compiler too (ldist_load_cell, lua_bindings/state.c) */
        int flags = 0;
        int st_load = ldist_load_cell(L, src, strlen(src), "=stdin", &flags);
        *quiet = (flags & LDIST_CELL_QUIET) != 0;
        if (st_load == LUA_OK) {
            history_add(src);
            lua_remove(L, -2);
            return CHUNK_EXPR;
        }
        if (!(flags & LDIST_CELL_INCOMPLETE)) {
            history_add(src);                     /* so the typo can be fixed with Up */
            repl_report(L, st_load);
            lua_pop(L, 1);
            return CHUNK_NONE;
        }
        lua_pop(L, 1);                            /* the message; chunk */
        st = read_line(pr2, &line);
        if (st == READ_EOF && use_readline) {
            /* Ctrl-D on a continuation line drops the unfinished chunk, as
               Ctrl-C does; only Ctrl-D at the primary prompt quits */
            fputs("\n", stdout);
            lua_pop(L, 1);
            return CHUNK_NONE;
        }
        if (st != READ_OK) {
            if (st == READ_EOF) {
                /* end of piped input in the middle: report what was wrong, then stop */
                const char *s2 = lua_tostring(L, -1);
                if (luaL_loadbuffer(L, s2, strlen(s2), "=stdin") != LUA_OK) repl_report(L, LUA_ERRSYNTAX);
                else lua_pop(L, 1);
            }
            lua_pop(L, 1);
            return st == READ_EOF ? CHUNK_EOF : CHUNK_NONE;
        }
        lua_pushfstring(L, "%s\n%s", lua_tostring(L, -1), line);
        lua_remove(L, -2);
        free(line);
    }
}

/* Print the values from index `first` to the top, separated by tabs. */
static void print_values(lua_State *L, int first) {
    int top = lua_gettop(L);
    if (first > top) return;
    luaL_checkstack(L, 4, "too many results to print");
    for (int i = first; i <= top; i++) {
        ldist_repr(L, i);
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        if (i > first) fputc('\t', stdout);
        fwrite(s, 1, len, stdout);
        lua_pop(L, 1);
    }
    fputc('\n', stdout);
    fflush(stdout);
}

/* ---- the loop -------------------------------------------------------------- */

int repl_run(lua_State *L, int banner) {
    unfinished_L = L;
    use_readline = isatty(0);
    if (use_readline) {
        rl_readline_name = "ldist";
        rl_catch_signals = 0;      /* SIGINT is ours (read_line, ldist_docall) */
        history_init();
        repl_complete_init(L);
    }
    /* Between reading and running, a Ctrl-C is remembered (and dropped at
       the next prompt) rather than fatal; ldist_docall installs its own
       handler while code runs. No SA_RESTART: select() must wake up. */
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prompt_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    if (banner) repl_banner(stdout);
    /* plot() and friends show values through the REPL from now on */
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE &&
        lua_getfield(L, -1, "ldist") == LUA_TTABLE) {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "interactive");
    }
    lua_settop(L, 0);

    for (;;) {
        int quiet = 0;
        chunk_kind k = read_chunk(L, &quiet);
        if (k == CHUNK_EOF) break;
        if (k == CHUNK_NONE) {
            lua_settop(L, 0);
            continue;
        }
        int status = ldist_docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK) {
            if (k == CHUNK_EXPR && !quiet) print_values(L, 1);
        } else {
            if (ld_interrupt_flag) fputc('\n', stdout);   /* after the terminal's ^C */
            repl_report(L, status);
        }
        lua_settop(L, 0);
        fflush(stdout);
    }
    fputc('\n', stdout);
    fflush(stdout);
    sigaction(SIGINT, &old_sa, NULL);
    if (use_readline) history_close();
    return unfinished_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
