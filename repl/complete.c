/*
 * complete.c - readline's Tab completion, backed by ldist.complete (the Lua
 * prelude, ui/help.lua), which the Jupyter kernel shares:
 *
 *     ldist.complete(text_before_cursor) -> matches, start, kind
 *
 * `matches` replace text_before_cursor from byte `start` (1-based) on;
 * `kind` is "expr" (globals, fields, methods), "module" (inside the string
 * of a require) or "file" (inside any other string).
 */
#include "repl.h"

#include <lauxlib.h>
#include <readline/readline.h>

#include <stdlib.h>
#include <string.h>

static lua_State *complete_L;

/* Where the shown part of a match starts: after the last '.', ':' or '/'
   (a trailing '/' of a directory does not count). */
static const char *display_part(const char *m) {
    size_t n = strlen(m);
    if (n && m[n - 1] == '/') n--;
    while (n > 0 && m[n - 1] != '.' && m[n - 1] != ':' && m[n - 1] != '/') n--;
    return m + n;
}

static void display_matches(char **matches, int num, int max_length) {
    (void)max_length;
    char **shown = calloc((size_t)num + 2, sizeof *shown);
    if (!shown) return;
    int maxlen = 0;
    shown[0] = matches[0];
    for (int i = 1; i <= num; i++) {
        shown[i] = (char *)display_part(matches[i]);
        int l = (int)strlen(shown[i]);
        if (l > maxlen) maxlen = l;
    }
    rl_display_match_list(shown, num, maxlen);
    rl_forced_update_display();
    free(shown);
}

static char *xstrndup(const char *s, size_t n) {
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = '\0';
    }
    return r;
}

/* Call ldist.complete on the text before the cursor; returns readline's
   match array (element 0: the common prefix) or NULL. */
static char **attempt(const char *text, int start, int end) {
    (void)text;
    rl_attempted_completion_over = 1;       /* never fall back to file names */
    lua_State *L = complete_L;
    int top = lua_gettop(L);
    char **result = NULL;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) != LUA_TTABLE ||
        lua_getfield(L, -1, "ldist") != LUA_TTABLE ||
        lua_getfield(L, -1, "complete") != LUA_TFUNCTION)
        goto done;
    lua_pushlstring(L, rl_line_buffer, (size_t)end);
    if (lua_pcall(L, 1, 3, 0) != LUA_OK || !lua_istable(L, -3)) goto done;
    const char *kind = lua_tostring(L, -1);
    int wstart = (int)lua_tointeger(L, -2) - 1;     /* 0-based */
    int n = (int)luaL_len(L, -3);
    if (n <= 0 || wstart < 0 || wstart > end) goto done;

    rl_completion_append_character = '\0';
    rl_filename_completion_desired = 0;      /* ldist.complete already did the file names */
    rl_filename_quoting_desired = 0;
    /* A closing quote after a unique module or file name (not a directory:
       the user goes on typing inside it), never after an expression. */
    int in_string = kind && (strcmp(kind, "file") == 0 || strcmp(kind, "module") == 0);
    if (in_string && n == 1) {
        lua_rawgeti(L, -3, 1);
        size_t l1;
        const char *m1 = lua_tolstring(L, -1, &l1);
        if (m1 && l1 && m1[l1 - 1] == '/') in_string = 0;
        lua_pop(L, 1);
    }
    rl_completion_suppress_quote = !in_string;

    result = calloc((size_t)n + 2, sizeof *result);
    if (!result) goto done;
    int k = 0;
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, -3, i);
        size_t mlen;
        const char *m = lua_tolstring(L, -1, &mlen);
        if (m) {
            /* Readline replaces [start, end); ldist.complete replaced [wstart, end). */
            char *r = NULL;
            if (wstart >= start) {
                size_t pre = (size_t)(wstart - start);
                r = malloc(pre + mlen + 1);
                if (r) {
                    memcpy(r, rl_line_buffer + start, pre);
                    memcpy(r + pre, m, mlen + 1);
                }
            } else if (mlen >= (size_t)(start - wstart)) {
                r = strdup(m + (start - wstart));
            }
            if (r) result[++k] = r;
        }
        lua_pop(L, 1);
    }
    if (k == 0) {
        free(result);
        result = NULL;
        goto done;
    }
    /* element 0: the longest common prefix of the matches */
    size_t lcp = strlen(result[1]);
    for (int i = 2; i <= k; i++) {
        size_t j = 0;
        while (j < lcp && result[i][j] == result[1][j]) j++;
        lcp = j;
    }
    if (k == 1) {
        result[0] = result[1];
        result[1] = NULL;
    } else {
        result[0] = xstrndup(result[1], lcp);
        result[k + 1] = NULL;
    }
done:
    lua_settop(L, top);
    return result;
}

void repl_complete_init(lua_State *L) {
    complete_L = L;
    rl_attempted_completion_function = attempt;
    rl_completion_display_matches_hook = display_matches;
    /* '.' and ':' belong to the word (`string.fo`, `obj:fi`) */
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,)}[]+-*/%^~#";
    rl_completer_word_break_characters = rl_basic_word_break_characters;
    rl_completer_quote_characters = "\"'";
}
