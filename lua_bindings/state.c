/*
 * state.c - the interpreter setup every front end shares: ldist_newstate,
 * the traceback message handler, protected calls that Ctrl-C can interrupt,
 * the one compiler of interactive input (a REPL line, a notebook cell),
 * and a few small helpers the Lua prelude needs (ldist.repr, ldist.isatty,
 * ldist.termsize, ldist.walltime, ldist._listdir).
 *
 * Interrupts work the way lua.c's do: SIGINT sets a hook on the running state
 * that raises an error at the next Lua instruction, so the Lua stack unwinds
 * normally and every variable survives. C loops in the engine cannot see a
 * hook, so the handler also sets ld_interrupt_flag, which they poll.
 */
#include "ldist.h"
#include "ld_core.h"

#include <lauxlib.h>
#include <lualib.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers exposed as ldist.* ------------------------------------ */

/* ldist.isatty(fd | file) -> boolean; fd defaults to 1 (stdout). */
static int l_isatty(lua_State *L) {
    int fd = 1;
    if (lua_isinteger(L, 1)) {
        fd = (int)lua_tointeger(L, 1);
    } else if (!lua_isnoneornil(L, 1)) {
        luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
        if (s->closef == NULL || s->f == NULL) return luaL_argerror(L, 1, "file is closed");
        fd = fileno(s->f);
    }
    lua_pushboolean(L, isatty(fd));
    return 1;
}

/* ldist.termsize() -> columns, rows of the terminal on stdout/stderr, or nil. */
static int l_termsize(lua_State *L) {
    struct winsize ws;
    if ((ioctl(1, TIOCGWINSZ, &ws) == 0 || ioctl(2, TIOCGWINSZ, &ws) == 0) && ws.ws_col > 0) {
        lua_pushinteger(L, ws.ws_col);
        lua_pushinteger(L, ws.ws_row);
        return 2;
    }
    lua_pushnil(L);
    return 1;
}

/* ldist.walltime() -> seconds on a monotonic clock (os.clock counts CPU time
   of every thread, which is wrong for rates when the engine runs threads). */
static int l_walltime(lua_State *L) {
    lua_pushnumber(L, ld_now());
    return 1;
}

/* ldist._listdir(path) -> array of entry names, directories with a trailing
   "/", or nil, message. Used by tab completion of file names in strings. */
static int l_listdir(lua_State *L) {
    const char *path = luaL_optstring(L, 1, ".");
    DIR *d = opendir(*path ? path : ".");
    if (!d) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_newtable(L);
    lua_Integer n = 0;
    struct dirent *e;
    luaL_Buffer b;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int isdir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
            char full[4096];
            struct stat st;
            snprintf(full, sizeof full, "%s/%s", *path ? path : ".", e->d_name);
            isdir = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
        }
        luaL_buffinit(L, &b);
        luaL_addstring(&b, e->d_name);
        if (isdir) luaL_addchar(&b, '/');
        luaL_pushresult(&b);
        lua_rawseti(L, -2, ++n);
    }
    closedir(d);
    return 1;
}

/* ldist.repr(v) -> the text the REPL prints for v (see ldist_repr). */
static int l_repr(lua_State *L) {
    luaL_checkany(L, 1);
    ldist_repr(L, 1);
    return 1;
}

/* ---- traceback filtering, as Keras's (keras.config.disable_traceback_filtering):
   an error raised inside ldist's Lua prelude is reported at the user's line
   (the innermost frame of code that is not the prelude's), and tracebacks
   leave out the prelude's frames. LDIST_TRACEBACK_FILTERING=0, or
   ldist.config.traceback_filtering(false), shows them. */
#define PRELUDE_SOURCE "=[ldist prelude "   /* its chunk names (scripts/embed.lua) */
#define PRELUDE_SHORT "[ldist prelude "     /* ... as messages and tracebacks print them */
static int tb_filter = -1;                  /* -1: LDIST_TRACEBACK_FILTERING not read yet */

static int filtering(void) {
    if (tb_filter < 0) {
        const char *e = getenv("LDIST_TRACEBACK_FILTERING");
        tb_filter = !(e && (!strcmp(e, "0") || !strcmp(e, "false")));
    }
    return tb_filter;
}

/* ldist._traceback_filtering([on]) -> whether it was on (ldist.config.traceback_filtering) */
static int l_traceback_filtering(lua_State *L) {
    int was = filtering();
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TBOOLEAN);
        tb_filter = lua_toboolean(L, 1);
    }
    lua_pushboolean(L, was);
    return 1;
}

static int l_keep_traceback(lua_State *L);   /* below, with ldist_traceback */
static void forget_kept(lua_State *L);

static const luaL_Reg helpers[] = {
    {"_traceback_filtering", l_traceback_filtering},
    {"_keep_traceback", l_keep_traceback},
    {"repr", l_repr},
    {"isatty", l_isatty},
    {"termsize", l_termsize},
    {"walltime", l_walltime},
    {"_listdir", l_listdir},
    {NULL, NULL},
};

/* Add the helpers to the module table at the top of the stack. ldist_newstate
   does; luaopen_ldist may as well, so `require "ldist"` from lua5.4 has them. */
void ldist_set_helpers(lua_State *L) {
    luaL_setfuncs(L, helpers, 0);
    lua_getglobal(L, "xpcall");                   /* the base library's, for ldist._keep_traceback */
    lua_setfield(L, LUA_REGISTRYINDEX, "ldist.xpcall");
}

/* ---- interactive input --------------------------------------------------- */

static int is_name_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_name_char(int c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

/* Skip a long bracket `[==[ ... ]==]` starting at s[i] == '['; returns the
   index after it, or (size_t)-1 when s[i] does not open one. */
static size_t skip_long_bracket(const char *s, size_t len, size_t i) {
    size_t j = i + 1, level = 0;
    while (j < len && s[j] == '=') j++, level++;
    if (j >= len || s[j] != '[') return (size_t)-1;
    for (j++; j < len; j++) {
        if (s[j] != ']') continue;
        size_t k = j + 1, l = 0;
        while (k < len && s[k] == '=') k++, l++;
        if (l == level && k < len && s[k] == ']') return k + 1;
    }
    return len;
}

/* Index after the whitespace and comments at s[i]. */
static size_t skip_space(const char *s, size_t len, size_t i) {
    for (;;) {
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
        if (i + 1 < len && s[i] == '-' && s[i + 1] == '-') {
            size_t e = i + 2 < len && s[i + 2] == '[' ? skip_long_bracket(s, len, i + 2) : (size_t)-1;
            if (e != (size_t)-1) i = e;
            else while (i < len && s[i] != '\n') i++;
            continue;
        }
        return i;
    }
}

/* After `local` at top level: does `function` or `name {, name} =` follow? */
static int droppable_local(const char *s, size_t len, size_t i) {
    i = skip_space(s, len, i);
    if (len - i > 8 && !memcmp(s + i, "function", 8) && !is_name_char((unsigned char)s[i + 8])) return 1;
    for (;;) {
        if (i >= len || !is_name_start((unsigned char)s[i])) return 0;
        while (i < len && is_name_char((unsigned char)s[i])) i++;
        i = skip_space(s, len, i);
        if (i < len && s[i] == ',') {
            i = skip_space(s, len, i + 1);
            continue;
        }
        return i < len && s[i] == '=' && (i + 1 >= len || s[i + 1] != '=');
    }
}

int ldist_keep_top_locals(char *s, size_t len) {
    int depth = 0, loop_header = 0, dropped = 0;
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (c == '-' && i + 1 < len && s[i + 1] == '-') {
            i = skip_space(s, len, i);
        } else if (c == '"' || c == '\'') {
            for (i++; i < len && s[i] != (char)c && s[i] != '\n'; i++)
                if (s[i] == '\\') i++;
            i++;
        } else if (c == '[') {
            size_t e = skip_long_bracket(s, len, i);
            i = e == (size_t)-1 ? i + 1 : e;
        } else if (c >= '0' && c <= '9') {
            while (i < len && (is_name_char((unsigned char)s[i]) || s[i] == '.')) i++;
        } else if (is_name_start(c)) {
            size_t b = i;
            while (i < len && is_name_char((unsigned char)s[i])) i++;
            size_t n = i - b;
            const char *w = s + b;
            /* a name after '.' or ':' is a field (t.end is no keyword) */
            size_t p = b;
            while (p > 0 && (s[p - 1] == ' ' || s[p - 1] == '\t')) p--;
            if (p > 0 && (s[p - 1] == '.' || s[p - 1] == ':') && !(p > 1 && s[p - 2] == '.')) continue;
#define KW(k) (n == sizeof(k) - 1 && !memcmp(w, k, n))
            if (KW("function") || KW("if") || KW("repeat")) depth++;
            else if (KW("while") || KW("for")) depth++, loop_header = 1;
            else if (KW("do")) {
                if (loop_header) loop_header = 0;
                else depth++;
            } else if (KW("end") || KW("until")) {
                if (depth > 0) depth--;
            } else if (KW("local") && depth == 0 && droppable_local(s, len, i)) {
                memset(s + b, ' ', n);
                dropped++;
            }
#undef KW
        } else {
            i++;
        }
    }
    return dropped;
}

/* ---- one cell compiler ---------------------------------------------------- */
/* The REPL's lines and the kernel's cells compile here, the same way. */

#define CELL_TAIL_TRIES 64   /* how many statement starts the last-expression step tries */

static int is_keyword(const char *w, size_t n) {
    static const char *const kw[] = {"and", "break", "do", "else", "elseif", "end", "false", "for",
                                     "function", "goto", "if", "in", "local", "nil", "not", "or",
                                     "repeat", "return", "then", "true", "until", "while", NULL};
    for (int i = 0; kw[i]; i++)
        if (strlen(kw[i]) == n && !memcmp(kw[i], w, n)) return 1;
    return 0;
}

static void trim(const char **s, const char **e) {
    while (*s < *e && isspace((unsigned char)**s)) (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

int ldist_cell_quiet(const char *code, size_t len) {
    while (len > 0 && isspace((unsigned char)code[len - 1])) len--;
    return len > 0 && code[len - 1] == ';';
}

int ldist_help_shortcut(const char *code, size_t len, char *out, size_t outlen) {
    const char *s = code, *e = code + len;
    trim(&s, &e);
    int marks = 0;
    if (e - s == 4 && !memcmp(s, "help", 4)) {           /* bare `help`: Python's hint, as help() */
        if (outlen < 7) return 0;
        memcpy(out, "help()", 7);
        return 1;
    }
    if (e - s > 5 && !memcmp(s, "help", 4) && (s[4] == ' ' || s[4] == '\t')) {
        s += 5;                                          /* `help nn.Dense`, as IPython's `help x`-less cousins */
        while (s < e && (*s == ' ' || *s == '\t')) s++;
        marks = 1;
    }
    while (s < e && *s == '?') s++, marks++;
    while (e > s && e[-1] == '?') e--, marks++;
    if (!marks || s == e || (size_t)(e - s) + 8 > outlen) return 0;
    for (const char *p = s; p < e; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != ':') return 0;
    if (isdigit((unsigned char)*s)) return 0;
    size_t k = (size_t)snprintf(out, outlen, "help(");
    for (const char *p = s; p < e; p++) out[k++] = *p == ':' ? '.' : *p;
    out[k++] = ')';
    out[k] = 0;
    return 1;
}

static int ends_at_eof(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    return msg && n >= 5 && !strcmp(msg + n - 5, "<eof>");
}

/* Load a ++ b ++ c; on failure pop the message (and note "<eof>" in *eof). */
static int try_load(lua_State *L, const char *a, size_t alen, const char *b, size_t blen,
                    const char *c, size_t clen, const char *chunkname, int *eof) {
    luaL_Buffer buf;
    luaL_buffinit(L, &buf);
    luaL_addlstring(&buf, a, alen);
    luaL_addlstring(&buf, b, blen);
    luaL_addlstring(&buf, c, clen);
    luaL_pushresult(&buf);
    size_t n;
    const char *src = lua_tolstring(L, -1, &n);
    int st = luaL_loadbuffer(L, src, n, chunkname);
    lua_remove(L, -2);
    if (st != LUA_OK) {
        if (eof && ends_at_eof(L, st)) *eof = 1;
        lua_pop(L, 1);
    }
    return st;
}

static int blank_or_comment(const char *s, const char *end) {
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    return s == end || *s == '\n' || (end - s >= 2 && s[0] == '-' && s[1] == '-');
}

/* Could a statement starting at s be an expression? Skips the keyword
   statements, so the last-expression step compiles little. */
static int may_start_expression(const char *s, const char *end) {
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    if (s == end || *s == '\n' || *s == ':' || *s == ')' || *s == ']' || *s == '}' ||
        *s == ',' || *s == '=')
        return 0;
    if (!is_name_start((unsigned char)*s)) return 1;
    const char *w = s;
    while (w < end && is_name_char((unsigned char)*w)) w++;
    size_t n = (size_t)(w - s);
    return !is_keyword(s, n) || (n == 3 && !memcmp(s, "nil", 3)) || (n == 3 && !memcmp(s, "not", 3)) ||
           (n == 4 && !memcmp(s, "true", 4)) || (n == 5 && !memcmp(s, "false", 5)) ||
           (n == 8 && !memcmp(s, "function", 8));
}

/* The three attempts, on code whose top-level locals are already dropped. */
static int load_steps(lua_State *L, const char *code, size_t len, const char *chunkname, int *eof) {
    size_t t = len;
    while (t > 0 && isspace((unsigned char)code[t - 1])) t--;
    /* 1. one expression (or a list): `6*7;` compiles as `return 6*7;` */
    if (try_load(L, "return ", 7, code, len, "", 0, chunkname, eof) == LUA_OK) return LUA_OK;
    /* 2. the last statement as an expression: statement starts (line
       starts, and just after a ';'), last first */
    const char *end = code + len;
    int tried = 0;
    for (const char *ls = code + t; ls-- > code && tried < CELL_TAIL_TRIES;) {
        if (ls > code && ls[-1] != '\n' && ls[-1] != ';') continue;
        if (blank_or_comment(ls, end)) continue;
        tried++;
        if (!may_start_expression(ls, end)) continue;
        size_t head = (size_t)(ls - code);
        if (try_load(L, code, head, "", 0, "", 0, chunkname, NULL) != LUA_OK) continue;
        lua_pop(L, 1);
        if (try_load(L, code, head, "return ", 7, ls, (size_t)(end - ls), chunkname, NULL) == LUA_OK)
            return LUA_OK;
    }
    /* 3. statements; their error is the one reported */
    int st = luaL_loadbuffer(L, code, len, chunkname);
    if (st != LUA_OK && ends_at_eof(L, st)) *eof = 1;
    return st;
}

static int raise_upvalue(lua_State *L) {
    lua_pushvalue(L, lua_upvalueindex(1));
    return lua_error(L);
}

/* Protected half of push_misspelt_global: name at 1 -> the hint ("; did
   you mean 'model'?") or nothing. Reading the global may run an __index of
   _G, which may raise. */
static int misspelt_k(lua_State *L) {
    const char *name = lua_tostring(L, 1);
    if (lua_getglobal(L, name) != LUA_TNIL) return 0;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) != LUA_TTABLE ||
        lua_getfield(L, -1, "ldist") != LUA_TTABLE ||
        lua_getfield(L, -1, "_did_you_mean") != LUA_TFUNCTION)
        return 0;
    lua_pushfstring(L, "a nil value (global '%s')", name);
    lua_call(L, 1, 1);
    const char *hint = lua_type(L, -1) == LUA_TSTRING ? strstr(lua_tostring(L, -1), "; did you mean") : NULL;
    if (!hint) return 0;
    lua_pushstring(L, hint);
    return 1;
}

/* A cell that is one bare global name holding nil, close to a name that
   exists (`modle`): push a function raising "global 'modle' is nil; did you
   mean 'model'?" and return 1, where Lua would show a silent nil. */
static int push_misspelt_global(lua_State *L, const char *code, size_t len, const char *chunkname) {
    const char *s = code, *e = code + len;
    trim(&s, &e);
    if (s == e || !is_name_start((unsigned char)*s)) return 0;
    for (const char *p = s; p < e; p++)
        if (!is_name_char((unsigned char)*p)) return 0;
    if (is_keyword(s, (size_t)(e - s))) return 0;
    int top = lua_gettop(L);
    lua_pushcfunction(L, misspelt_k);
    lua_pushlstring(L, s, (size_t)(e - s));
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || lua_type(L, -1) != LUA_TSTRING) {
        lua_settop(L, top);
        return 0;
    }
    const char *where = chunkname[0] == '=' || chunkname[0] == '@' ? chunkname + 1 : chunkname;
    const char *hint = lua_tostring(L, -1);
    const char *name = lua_pushlstring(L, s, (size_t)(e - s));
    lua_pushfstring(L, "%s:1: global '%s' is nil%s", where, name, hint);
    lua_pushcclosure(L, raise_upvalue, 1);
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    return 1;
}

int ldist_load_cell(lua_State *L, const char *code, size_t len, const char *chunkname, int *flags) {
    forget_kept(L);   /* a new line or cell: no earlier error's frames */
    char shortcut[512];
    int fl = 0;
    if (ldist_help_shortcut(code, len, shortcut, sizeof shortcut)) {
        code = shortcut;
        len = strlen(shortcut);
    } else {
        const char *s = code, *e = code + len;
        trim(&s, &e);
        if (s < e && *s == '=') {             /* `=expr`, as in Lua 5.1-5.3 */
            len -= (size_t)(s + 1 - code);
            code = s + 1;
        }
    }
    if (ldist_cell_quiet(code, len)) fl |= LDIST_CELL_QUIET;
    int eof = 0, st;
    if (push_misspelt_global(L, code, len, chunkname)) {
        st = LUA_OK;
    } else {
        /* a top-level `local` outlives its cell (ldist_keep_top_locals) */
        char *src = malloc(len + 1);
        if (!src) {
            lua_pushliteral(L, "not enough memory");
            return LUA_ERRMEM;
        }
        memcpy(src, code, len);
        src[len] = '\0';
        ldist_keep_top_locals(src, len);
        st = load_steps(L, src, len, chunkname, &eof);
        free(src);
    }
    if (st != LUA_OK && eof) fl |= LDIST_CELL_INCOMPLETE;
    if (flags) *flags = fl;
    return st;
}

/* ---- the state ----------------------------------------------------------- */

/* ldist.globals (name -> true) as globals, from the module table at the top of the stack */
static void set_globals(lua_State *L) {
    lua_getfield(L, -1, "globals");
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_toboolean(L, -1) && lua_type(L, -2) == LUA_TSTRING) {
                const char *k = lua_tostring(L, -2);
                lua_getfield(L, -4, k);
                lua_setglobal(L, k);
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

/* Runs protected: load the module, set the helpers and the globals (unless
   the prelude waits for ldist_finish_state). */
static int init_state(lua_State *L) {
    int deferred = lua_toboolean(L, 1);
    if (deferred) {
        lua_pushboolean(L, 1);
        lua_setfield(L, LUA_REGISTRYINDEX, LDIST_PRELUDE_DEFERRED);
    }
    luaL_openlibs(L);
    luaL_requiref(L, "ldist", luaopen_ldist, 0);   /* also package.loaded.ldist */
    ldist_set_helpers(L);
    lua_pushvalue(L, -1);
    lua_setglobal(L, "ldist");                      /* for exploring: ldist.version, ... */
    if (!deferred) set_globals(L);
    return 0;
}

/* the one report of a state whose modules failed to load (the message on the stack, popped) */
static void report_load_failure(lua_State *L, const char *before) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "%sldist: cannot load the ldist modules: %s\n", before, msg ? msg : "(no message)");
    lua_pop(L, 1);
}

static lua_State *new_state(int deferred) {
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "ldist: cannot create a Lua state: not enough memory\n");
        return NULL;
    }
    lua_pushcfunction(L, init_state);
    lua_pushboolean(L, deferred);
    if (ldist_docall(L, 1, 0) != LUA_OK) {
        report_load_failure(L, "");
        lua_close(L);
        return NULL;
    }
    return L;
}

lua_State *ldist_newstate(void) { return new_state(0); }
lua_State *ldist_newstate_deferred(void) { return new_state(1); }

static int finish_state(lua_State *L) {
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, LDIST_PRELUDE_DEFERRED);
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "ldist");
    ldist_run_prelude(L);
    set_globals(L);
    return 0;
}

int ldist_finish_state(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, LDIST_PRELUDE_DEFERRED) == LUA_TNIL) {
        lua_pop(L, 1);
        return LUA_OK;
    }
    lua_pop(L, 1);
    /* not ldist_docall: its Ctrl-C handler would abort the load, where the
       REPL's own handler only drops the line being typed */
    lua_pushcfunction(L, ldist_traceback);
    lua_pushcfunction(L, finish_state);
    int st = lua_pcall(L, 0, 0, -2);
    lua_remove(L, st == LUA_OK ? -1 : -2);
    if (st != LUA_OK) report_load_failure(L, "\n");   /* after the prompt */
    return st;
}

/* ---- errors and interrupts ------------------------------------------------ */

/* "attempt to call a nil value (global 'prnt')": ldist._did_you_mean
   (ui/help.lua) adds "; did you mean 'print'?" while the failed function is
   still on the stack (its locals are candidates too). Replaces the string at
   index 1 when it has a hint; never raises. */
static void add_hint(lua_State *L) {
    if (!strstr(lua_tostring(L, 1), "a nil value (")) return;
    int top = lua_gettop(L);
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE &&
        lua_getfield(L, -1, "ldist") == LUA_TTABLE &&
        lua_getfield(L, -1, "_did_you_mean") == LUA_TFUNCTION) {
        lua_pushvalue(L, 1);
        lua_pushinteger(L, 3);       /* _did_you_mean, this handler, the failed function */
        if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) lua_replace(L, 1);
    }
    lua_settop(L, top);
}

/* The innermost frame of the user's code ("file:line") on thread th, pushed
   on L, or nothing (returns 0) when only the prelude's and C's frames are
   on its stack. */
static int push_user_line(lua_State *L, lua_State *th) {
    lua_Debug ar;
    for (int level = 1; lua_getstack(th, level, &ar); level++) {
        if (!lua_getinfo(th, "Sl", &ar) || ar.currentline <= 0) continue;   /* C */
        if (!strncmp(ar.source, PRELUDE_SOURCE, strlen(PRELUDE_SOURCE))) continue;
        lua_pushfstring(L, "%s:%d", ar.short_src, ar.currentline);
        return 1;
    }
    return 0;
}

/* Past the "replica 1 (cpu:1): " or "worker 2: " that Mirrored's and
   MultiWorkerMirrored's run put before a replica's error, or msg itself */
static const char *past_replica_prefix(const char *msg) {
    const char *p = msg;
    if (!strncmp(p, "replica ", 8)) p += 8;
    else if (!strncmp(p, "worker ", 7)) p += 7;
    else return msg;
    if (*p < '0' || *p > '9') return msg;
    while (*p >= '0' && *p <= '9') p++;
    if (p[0] == ' ' && p[1] == '(') {
        const char *close = strchr(p, ')');
        if (!close) return msg;
        p = close + 1;
    }
    return (p[0] == ':' && p[1] == ' ') ? p + 2 : msg;
}

/* A message that starts at a prelude position ("[ldist prelude keras/training]:927: ...")
   starts at the innermost frame of the user's code instead, or without a
   position when a tail call (a REPL line's `return m:fit(...)`) left none.
   Replaces the string at index 1. */
static void move_to_user_line(lua_State *L, const char *kept_line) {
    const char *msg = lua_tostring(L, 1);
    const char *at = past_replica_prefix(msg);    /* "replica 1 (cpu:1): [ldist prelude ...]:9: ..." too */
    if (strncmp(at, PRELUDE_SHORT, strlen(PRELUDE_SHORT)) != 0) return;
    const char *p = strstr(at + strlen(PRELUDE_SHORT), "]:");
    if (!p) return;
    for (p += 2; *p >= '0' && *p <= '9'; p++) {}
    if (p[0] != ':' || p[1] != ' ') return;
    lua_pushlstring(L, msg, (size_t)(at - msg));  /* the replica's prefix, or "" */
    if (kept_line) {
        lua_pushfstring(L, "%s: %s", kept_line, p + 2);
    } else if (push_user_line(L, L)) {
        lua_pushfstring(L, "%s: %s", lua_tostring(L, -1), p + 2);
        lua_remove(L, -2);
    } else {
        lua_pushstring(L, p + 2);
    }
    lua_concat(L, 2);
    lua_replace(L, 1);
}

/* msg and the traceback `frames` (luaL_traceback's text without a message:
   "stack traceback:\n\t..."), less the prelude's frames and the C functions
   and tail calls that a prelude frame called (the line after them) when
   filtering */
static void push_traceback(lua_State *L, const char *msg, const char *frames) {
    const char *head = "stack traceback:\n";
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, msg);
    luaL_addstring(&b, "\nstack traceback:");
    const char *line = strncmp(frames, head, strlen(head)) ? frames : frames + strlen(head);
    int filter = filtering();
    while (*line) {
        const char *end = strchr(line, '\n'), *next = end ? end + 1 : line + strlen(line);
        const char *f = line;
        while (*f == '\t' || *f == ' ') f++;
        const char *g = next;
        while (*g == '\t' || *g == ' ') g++;
        int prelude = !strncmp(f, PRELUDE_SHORT, strlen(PRELUDE_SHORT));
        int called_by_prelude = (!strncmp(f, "[C]:", 4) || !strncmp(f, "(...tail calls...)", 18)) &&
                                !strncmp(g, PRELUDE_SHORT, strlen(PRELUDE_SHORT));
        if (!filter || (!prelude && !called_by_prelude)) {
            luaL_addstring(&b, "\n");
            luaL_addlstring(&b, line, (size_t)((end ? end : next) - line));
        }
        line = next;
    }
    luaL_pushresult(&b);
}

/* ---- tracebacks across the prelude's rethrows
   fit, strategy:run and scope(fn) catch an error to clean up, then raise it
   again (error(err, 0)), which loses the frames below them: the user's
   callback, loss or layer that raised it. They catch it with
   xpcall(f, ldist._keep_traceback), which keeps the frames at the error
   (and the user's line there) beside the error value; ldist_traceback then
   shows those for that error. The C functions that call Lua code and raise
   its error again (a Lua model's call, the compiled loss, tape:record) do
   the same through lb_pcall_kept, and a replica's coroutine through
   ldist._keep_traceback(msg, co, err). A new line or cell (ldist_load_cell)
   and a new script (ldist_docall) forget what was kept. */
#define KEPT_KEY "ldist.kept_traceback"

static void forget_kept(lua_State *L) {
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, KEPT_KEY);
}

/* Is the function running at stack level `level` of thread th the value at
   L's idx? (th may be a dead coroutine: its stack stays after an error.) */
static int frame_is(lua_State *L, lua_State *th, int level, int idx) {
    lua_Debug ar;
    idx = lua_absindex(L, idx);
    if (!lua_getstack(th, level, &ar) || !lua_getinfo(L, "f", &ar)) return 0;
    int same = lua_rawequal(L, -1, idx);
    lua_pop(L, 1);
    return same;
}

/* Push the kept record ({err=, frames=, line=, site=}) when the error at idx
   is the one it kept and the function that caught it (its site) is raising
   it again: on th's stack at `level` (a C function's lua_error) or just
   above it (Lua's error(err, 0), `error` at `level`). Otherwise push nothing
   and return 0: an error kept, then caught by the user's pcall, is not
   mistaken for a later one of the same text, as its site is not raising. */
static int push_kept(lua_State *L, int idx, lua_State *th, int level) {
    idx = lua_absindex(L, idx);
    if (lua_getfield(L, LUA_REGISTRYINDEX, KEPT_KEY) == LUA_TTABLE) {
        lua_getfield(L, -1, "err");
        lua_getfield(L, -2, "site");
        int same = lua_rawequal(L, -2, idx) && (frame_is(L, th, level, -1) || frame_is(L, th, level + 1, -1));
        lua_pop(L, 2);
        if (same) return 1;
    }
    lua_pop(L, 1);
    return 0;
}

/* In a message handler: push the kept record for the error at idx when an
   inner site raised it again (its frames are the error's), or a new one with
   this stack's frames. */
static void push_record(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (push_kept(L, idx, L, 1)) return;          /* level 0: this handler */
    lua_createtable(L, 0, 4);
    lua_pushvalue(L, idx);
    lua_setfield(L, -2, "err");
    luaL_traceback(L, L, NULL, 1);
    lua_setfield(L, -2, "frames");
    if (push_user_line(L, L)) lua_setfield(L, -2, "line");
}

/* Set the record at the top as kept, with the function at `level` of L's
   stack as its site; pops it. */
static void set_kept(lua_State *L, int level) {
    lua_Debug ar;
    if (lua_getstack(L, level, &ar) && lua_getinfo(L, "f", &ar)) lua_setfield(L, -2, "site");
    lua_setfield(L, LUA_REGISTRYINDEX, KEPT_KEY);
}

/* The message handler of lb_pcall_kept: the site is set once lua_pcall returns */
static int keep_for_c(lua_State *L) {
    lua_settop(L, 1);
    push_record(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, KEPT_KEY);
    return 1;
}

int lb_pcall_kept(lua_State *L, int nargs, int nres) {
    int base = lua_gettop(L) - nargs;             /* the function */
    lua_pushcfunction(L, keep_for_c);
    lua_insert(L, base);
    int st = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    if (st != LUA_OK && lua_getfield(L, LUA_REGISTRYINDEX, KEPT_KEY) == LUA_TTABLE) {
        lua_getfield(L, -1, "err");
        int ours = lua_rawequal(L, -1, -3);
        lua_pop(L, 1);
        if (ours) { set_kept(L, 0); return st; }  /* level 0: the C function that raises it next */
    }
    if (st != LUA_OK) lua_pop(L, 1);
    return st;
}

void lb_kept_follow(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (lua_getfield(L, LUA_REGISTRYINDEX, KEPT_KEY) != LUA_TTABLE) { lua_pop(L, 1); return; }
    lua_getfield(L, -1, "err");
    lua_getfield(L, -2, "site");
    const char *kept = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    const char *msg = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
    int follows = kept && msg && strstr(msg, kept) && frame_is(L, L, 0, -1);
    lua_pop(L, 2);
    if (follows) {
        lua_pushvalue(L, idx);
        lua_setfield(L, -2, "err");
    }
    lua_pop(L, 1);
}

/* ldist._keep_traceback(err) -> err: xpcall's message handler (above). The
   site is the function that called this xpcall: the frame above the
   innermost xpcall on the stack, since a handler runs for the innermost
   protected call.
   ldist._keep_traceback(msg, co, err) -> msg: a replica's coroutine co died
   of err, and the caller raises msg for it next: msg keeps co's frames (or
   those kept for err inside it) above the caller's. */
static int l_keep_traceback(lua_State *L) {
    lua_State *co = lua_tothread(L, 2);
    if (co) {
        lua_settop(L, 3);
        lua_createtable(L, 0, 4);                 /* 4: the record */
        lua_pushvalue(L, 1);
        lua_setfield(L, 4, "err");
        if (push_kept(L, 3, co, 0)) {             /* 5: kept inside co for err (level 0: what raised) */
            lua_getfield(L, 5, "frames");         /* 6 */
            lua_getfield(L, 5, "line");           /* 7 */
        } else {
            lua_pushnil(L);                       /* 5 */
            luaL_traceback(L, co, NULL, 0);       /* 6 */
            if (!push_user_line(L, co)) lua_pushnil(L);   /* 7 */
        }
        if (lua_isnil(L, 7)) {
            lua_pop(L, 1);
            if (!push_user_line(L, L)) lua_pushnil(L);
        }
        lua_setfield(L, 4, "line");
        luaL_traceback(L, L, NULL, 1);            /* 7: the caller's frames, below the coroutine's */
        const char *below = strchr(lua_tostring(L, 7), '\n');
        lua_pushstring(L, below ? below : "");    /* 8 */
        lua_remove(L, 7);
        lua_concat(L, 2);                         /* 6: all the frames */
        lua_setfield(L, 4, "frames");
        lua_settop(L, 4);
        set_kept(L, 1);                           /* the caller raises msg */
        lua_settop(L, 1);
        return 1;
    }
    lua_settop(L, 1);
    push_record(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "ldist.xpcall");
    lua_Debug ar;
    int site = 0;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (frame_is(L, L, level, -1)) { site = level + 1; break; }
    }
    lua_pop(L, 1);
    if (site) set_kept(L, site);
    else lua_setfield(L, LUA_REGISTRYINDEX, KEPT_KEY);
    lua_settop(L, 1);
    return 1;
}

int ldist_traceback(lua_State *L) {
    lua_settop(L, 1);
    /* the frames kept where a prelude function caught it (ldist._keep_traceback) */
    const char *frames = NULL, *kept_line = NULL;
    if (push_kept(L, 1, L, 1)) {                   /* the record at 2 keeps its strings at 3, 4 */
        forget_kept(L);
        lua_getfield(L, 2, "frames");
        lua_getfield(L, 2, "line");
        frames = lua_tostring(L, 3);
        kept_line = lua_tostring(L, 4);
    }
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {                             /* an error object that is not a string */
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;                              /* it says what it is */
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    } else if (lua_type(L, 1) == LUA_TSTRING) {
        add_hint(L);
        if (filtering()) move_to_user_line(L, kept_line);
        msg = lua_tostring(L, 1);
    }
    if (!frames) {
        luaL_traceback(L, L, NULL, 1);
        frames = lua_tostring(L, -1);
    }
    push_traceback(L, msg, frames);
    return 1;
}

static lua_State *volatile running_L;   /* the state a SIGINT should stop */
static volatile sig_atomic_t sigint_count;

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted");
}

void ldist_interrupt(lua_State *L) {
    /* lua_sethook and a store to a volatile int are safe in a signal handler
       (lua.c relies on the former). */
    ld_interrupt_flag = 1;
    if (L) lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

static void on_sigint(int sig) {
    (void)sig;
    sigint_count++;
    if (sigint_count >= 3) {
        /* Code that never returns to Lua nor polls the flag (a blocking
           system call): a third Ctrl-C falls back to the default action. */
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    if (sigint_count == 2) {
        static const char msg[] = "\nldist: still running; press Ctrl-C once more to quit\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
    }
    ldist_interrupt(running_L);
}

int ldist_docall(lua_State *L, int nargs, int nres) {
    int base = lua_gettop(L) - nargs;             /* function index */
    forget_kept(L);
    lua_pushcfunction(L, ldist_traceback);
    lua_insert(L, base);
    /* A stale interrupt (Ctrl-C between two calls) must not hit this call. */
    if (lua_gethook(L) == interrupt_hook) lua_sethook(L, NULL, 0, 0);
    ld_interrupt_flag = 0;

    lua_State *outer = running_L;                 /* nested calls (a kernel inside a call) */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    running_L = L;
    sigint_count = 0;
    sigaction(SIGINT, &sa, &old);
    int status = lua_pcall(L, nargs, nres, base);
    sigaction(SIGINT, &old, NULL);
    running_L = outer;

    if (lua_gethook(L) == interrupt_hook) lua_sethook(L, NULL, 0, 0);
    lua_remove(L, base);
    return status;
}
