/*
 * main.c - the `ldist` program: options, scripts and subcommands, the way
 * lua.c does them, then the REPL (repl.c).
 *
 *     ldist                     REPL on a terminal; runs standard input otherwise
 *     ldist script.lua a b      runs a script (arg[0] = "script.lua", ... = "a", "b")
 *     ldist -i script.lua       runs it, then the REPL with its globals
 *     ldist -e 'print(1)'       runs a string
 *     ldist kernel -f FILE      the Jupyter kernel (kernel/)
 *     ldist launch -n N s.lua   N processes training as one cluster (engine/net/ld_cluster_launch.c)
 *
 * The exit status is 1 after an uncaught error in a script or -e string.
 */
#include "repl.h"
#include "ldist.h"
#include "kernel.h"
#include "ld_core.h"
#include "ld_device.h"

#include <lauxlib.h>
#include <lualib.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: " LDIST_PROGNAME " [options] [script [args]]\n"
            "       " LDIST_PROGNAME " kernel -f CONNECTION_FILE   run the Jupyter kernel\n"
            "       " LDIST_PROGNAME " launch -n N script.lua [args]  run N processes as one cluster\n"
            "Options:\n"
            "  -e stat   execute string 'stat'\n"
            "  -i        enter interactive mode after running the script\n"
            "  -l mod    require library 'mod' into global 'mod'\n"
            "  -q        do not print the banner\n"
            "  -v        show version information\n"
            "  -h        show this help\n"
            "  --        stop handling options\n"
            "  -         execute stdin and stop handling options\n");
}

void repl_message(const char *msg) {
    fprintf(stderr, "%s: %s\n", LDIST_PROGNAME, msg ? msg : "(no message)");
    fflush(stderr);
}

void repl_banner(FILE *out) {
    fprintf(out, "ldist %s (%s) devices:", LD_VERSION, LUA_RELEASE);
    int n = ld_device_count();
    for (int i = 0; i < n; i++) {
        ld_device *d = ld_device_at(i);
        if (d) fprintf(out, "%s %s", i ? "," : "", d->name);
    }
    fputc('\n', out);
    fflush(out);
}

/* ---- running chunks -------------------------------------------------------- */

/* Shorten a traceback for people: drop the "[C]: in ?" frame at the bottom,
   and the whole traceback when it only says "in main chunk". */
static void push_short_error(lua_State *L, const char *msg) {
    const char *tb = strstr(msg, "\nstack traceback:\n");
    if (!tb) {
        lua_pushstring(L, msg);
        return;
    }
    /* the frames worth showing */
    lua_newtable(L);
    int ft = lua_gettop(L);
    int nf = 0, interesting = 0;
    const char *p = tb + strlen("\nstack traceback:\n");
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *f = p;
        while (len && (*f == '\t' || *f == ' ')) f++, len--;
        lua_pushlstring(L, f, len);
        const char *line = lua_tostring(L, -1);
        int skip = !strcmp(line, "[C]: in ?") || !strcmp(line, "[C]: in function 'error'") ||
                   !strcmp(line, "(...tail calls...)");
        if (skip) {
            lua_pop(L, 1);
        } else {
            lua_rawseti(L, ft, ++nf);
            size_t ml = strlen("in main chunk");
            if (!(len >= ml && !strcmp(line + len - ml, "in main chunk"))) interesting = 1;
        }
        if (!e) break;
        p = e + 1;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, msg, (size_t)(tb - msg));
    if (interesting) {
        luaL_addstring(&b, "\nstack traceback:");
        for (int i = 1; i <= nf && i <= 12; i++) {
            luaL_addstring(&b, "\n\t");
            lua_rawgeti(L, ft, i);
            luaL_addvalue(&b);
        }
        if (nf > 12) luaL_addstring(&b, "\n\t...");
    }
    luaL_pushresult(&b);
    lua_remove(L, ft);
}

int repl_report(lua_State *L, int status) {
    if (status != LUA_OK) {
        fflush(stdout);
        const char *msg = lua_tostring(L, -1);
        if (msg) {
            push_short_error(L, msg);
            repl_message(lua_tostring(L, -1));
            lua_pop(L, 1);
        } else {
            repl_message("(error object is not a string)");
        }
        lua_pop(L, 1);
    }
    return status;
}

static int dochunk(lua_State *L, int status) {
    if (status == LUA_OK) status = ldist_docall(L, 0, 0);
    return repl_report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name) {
    return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* Like lua.c: push the script's arguments, return how many. */
static int pushargs(lua_State *L) {
    if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
    int n = (int)luaL_len(L, -1);
    luaL_checkstack(L, n + 3, "too many arguments to script");
    int i;
    for (i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
    lua_remove(L, -i);
    return n;
}

static int handle_script(lua_State *L, char **argv) {
    const char *fname = argv[0];
    if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL;  /* stdin */
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = pushargs(L);
        status = ldist_docall(L, n, LUA_MULTRET);
    }
    return repl_report(L, status);
}

/* arg table: arg[0] the script, arg[1..] its arguments, negative indices the
   interpreter and its options (as lua.c does). */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
    if (script == argc) script = 0;   /* no script name */
    int narg = argc - (script + 1);
    lua_createtable(L, narg, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* ---- options ----------------------------------------------------------------- */

#define has_error 1
#define has_i 2
#define has_v 4
#define has_e 8
#define has_q 16
#define has_h 32

/* Like lua.c's collectargs: flags, and the index of the script (argc if none). */
static int collectargs(char **argv, int *first) {
    int args = 0;
    int i;
    if (argv[0] == NULL) {
        *first = 0;
        return 0;
    }
    for (i = 1; argv[i] != NULL; i++) {
        *first = i;
        if (argv[i][0] != '-') return args;          /* the script */
        switch (argv[i][1]) {
        case '-':
            if (argv[i][2] != '\0') {
                if (!strcmp(argv[i], "--help")) { args |= has_h; break; }
                if (!strcmp(argv[i], "--version")) { args |= has_v; break; }
                return has_error;
            }
            *first = i + 1;
            return args;
        case '\0': return args;                      /* '-': stdin as the script */
        case 'i':
            if (argv[i][2] != '\0') return has_error;
            args |= has_i;
            break;
        case 'v':
            if (argv[i][2] != '\0') return has_error;
            args |= has_v;
            break;
        case 'q':
            if (argv[i][2] != '\0') return has_error;
            args |= has_q;
            break;
        case 'h':
            if (argv[i][2] != '\0') return has_error;
            args |= has_h;
            break;
        case 'e':
            args |= has_e;
            /* fall through */
        case 'l':
            if (argv[i][2] == '\0') {
                i++;
                if (argv[i] == NULL || argv[i][0] == '-') return has_error;
            }
            break;
        default:
            return has_error;
        }
    }
    *first = i;
    return args;
}

/* Run the -e and -l options in order; returns 0 on an error. */
static int runargs(lua_State *L, char **argv, int n) {
    for (int i = 1; i < n; i++) {
        int option = argv[i][1];
        if (option != 'e' && option != 'l') continue;
        const char *extra = argv[i] + 2;
        if (*extra == '\0') extra = argv[++i];
        if (option == 'e') {
            if (dostring(L, extra, "=(command line)") != LUA_OK) return 0;
        } else {
            /* -l mod: mod = require "mod", or -l g=mod */
            char *eq = strchr(extra, '=');
            char gname[256];
            const char *mod = extra;
            if (eq) {
                snprintf(gname, sizeof gname, "%.*s", (int)(eq - extra), extra);
                mod = eq + 1;
            } else {
                snprintf(gname, sizeof gname, "%s", extra);
            }
            lua_getglobal(L, "require");
            lua_pushstring(L, mod);
            int status = ldist_docall(L, 1, 1);
            if (status == LUA_OK) lua_setglobal(L, gname);
            if (repl_report(L, status) != LUA_OK) return 0;
        }
    }
    return 1;
}

/* ---- main -------------------------------------------------------------------- */

typedef struct {
    int argc;
    char **argv;
    int status;   /* exit status */
} pmain_args;

static int pmain(lua_State *L) {
    pmain_args *pa = lua_touserdata(L, 1);
    int argc = pa->argc;
    char **argv = pa->argv;
    int script;
    int args = collectargs(argv, &script);
    pa->status = EXIT_FAILURE;
    if (args == has_error) {
        if (argv[script]) fprintf(stderr, LDIST_PROGNAME ": unrecognized option '%s'\n", argv[script]);
        usage(stderr);
        return 0;
    }
    if (args & has_h) {
        usage(stdout);
        pa->status = EXIT_SUCCESS;
        return 0;
    }
    createargtable(L, argv, argc, script);
    if (args & has_v) repl_banner(stdout);
    if (!runargs(L, argv, script)) return 0;
    int script_ok = 1;
    if (script < argc) {
        script_ok = handle_script(L, argv + script) == LUA_OK;
        if (!script_ok && !(args & has_i)) return 0;
    }
    if (args & has_i) {
        /* Like python -i: the REPL opens even after a failed script, so the
           state it left can be inspected; the exit status still says it failed. */
        int st = repl_run(L, !(args & has_q) && !(args & has_v));
        pa->status = script_ok ? st : EXIT_FAILURE;
        return 0;
    }
    if (script == argc && !(args & (has_e | has_v))) {
        if (isatty(0)) {
            pa->status = repl_run(L, !(args & has_q));
            return 0;
        }
        /* standard input is a script: `echo 'print(1+1)' | ldist` */
        if (dochunk(L, luaL_loadfile(L, NULL)) != LUA_OK) return 0;
    }
    pa->status = EXIT_SUCCESS;
    return 0;
}

/* `ldist` or `ldist -q` on a terminal: nothing but the REPL runs, so the
   prompt can show before the Lua prelude has loaded; the REPL loads it before
   it reads the first key (repl.c). Any other command line runs code first. */
static int prompt_first(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-q") != 0) return 0;
    return isatty(0);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "kernel") == 0) return ldist_kernel_cmd(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "launch") == 0) return ldist_launch_cmd(argc - 1, argv + 1);
    lua_State *L = prompt_first(argc, argv) ? ldist_newstate_deferred() : ldist_newstate();
    if (!L) return EXIT_FAILURE;
    pmain_args pa = {argc, argv, EXIT_FAILURE};
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, &pa);
    int status = lua_pcall(L, 1, 0, 0);
    if (status != LUA_OK) {
        repl_report(L, status);
        pa.status = EXIT_FAILURE;
    }
    fflush(stdout);
    lua_close(L);
    return pa.status;
}
